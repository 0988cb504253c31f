"""The runtime: the stored datasets and the jobs on them, the workers that hold and compute them.

Top to bottom: ``catalog`` (datasets: created from uploads, described, deleted, placed again at
start-up); ``jobs`` (a job's life: submitted, queued, run, waited for, cancelled), on
``results`` (result files written behind, cached, computed again) and ``oneshots`` (``POST
/v1/mst``), on ``sharding`` (jobs on graphs split over workers) and ``admission`` (quotas and
queue caps); ``supervisor`` (the workers, where each dataset goes, their health); ``pool``
(the API side of the workers: a handle per worker, the local and the Ray pool behind one
interface); ``worker`` (the worker process itself) and ``result_files`` (their size cap).
"""
