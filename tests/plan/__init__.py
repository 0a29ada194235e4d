"""Tests of convnet.plan: placements, update periods, the plan report and its graph."""
