"""The step executor: a plan's operations as tasks on one worker per logical device.

:mod:`~convnet.runtime.step.executor` is the entry (``Executor.step`` / ``evaluate``),
composed of its set-up (:mod:`~convnet.runtime.step.executor_setup`) and the methods of
its task actions (:mod:`~convnet.runtime.step.task_actions`), with a step's buffers and
results in :mod:`~convnet.runtime.step.records`; tasks, rank tasks and transfers say
what runs where; weights, optimizer and learning rules hold and update the state; batch
checks, non-finite reports and the memory meter watch it.  May import
:mod:`convnet.runtime.processes` and :mod:`convnet.runtime.devices`.
"""
