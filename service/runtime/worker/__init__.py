"""The worker process: it owns one device, keeps datasets resident on it and computes their tasks.

Its parts, top to bottom (each imports only those below it; ``lint-imports`` checks it):

* ``entry``: the spawned process's entry point, light to import (the API imports it to name the
  target; it imports the rest once it runs);
* ``process``: the worker process's start and the loop that answers its pipe
  (coalesced jobs, batched one-shots, the run stamp, the heartbeat);
* ``ops``: each request to its handler, and the one way a request is run (shared with the Ray
  actor);
* ``startup``, ``oneshots``, ``shards``: the start-up and warm-up before ``ready``; one-shot
  computations alone or batched; sharded graphs' sizing and last step;
* ``graphs``, ``points``, ``batching``: graphs made resident and their tasks; point sets and
  theirs; the disjoint union of one-shots;
* ``state``: the device and what is resident on it (memory, admission, result files);
* ``protocol``: the messages and the config, the one thing the API process imports from here.

Runs in the child process (it imports :mod:`gpu_core`, and through it CuPy, there); the API
process imports ``protocol`` for its messages and ``entry`` only to name the entry point.
"""
