"""The test suite: a folder per package of the project (config, plan, runtime, app, data,
layers, kernels, simulate, cuda, bench), whole-project checks in project/, and what the
tests share in support/ (imported as ``tests.support.<module>``)."""
