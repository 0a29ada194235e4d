"""What-if simulation of a plan: a cost model from a short profile, a list
schedule of the plan's operations, and the hardware figures it assumes.

* :mod:`convnet.simulate.hardware`: device kinds and links (bandwidth, latency);
* :mod:`convnet.simulate.profiler`: the short profile of the net (rounds, contention,
  wake-ups);
* :mod:`convnet.simulate.costs`: seconds per operation, from that profile;
* :mod:`convnet.simulate.schedule`: the simulated step (per-device busy and idle time);
* :mod:`convnet.simulate.report`: the text and JSON the command line prints.
"""
