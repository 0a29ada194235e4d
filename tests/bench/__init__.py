"""Tests of the benchmark scripts in bench/."""
