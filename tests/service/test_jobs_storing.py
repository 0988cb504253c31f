"""Results written behind their job's answer: requests for them wait for the file; a lost one is
computed again (tests/service/test_faults.py checks that against a live server)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from service.runtime.results import Results
from service.storage.records import JobRecord
from service.storage.store import Store


def succeeded_job(store: Store, job_id: str) -> JobRecord:
    job = JobRecord(
        job_id, "g_1", "succeeded", time.time(), time.time(), time.time(), None, None, 1, 5, 1, 0.1
    )
    store.add_job(job)
    return job


def test_a_result_request_waits_for_the_file(tmp_path: Path) -> None:
    store = Store(tmp_path)

    async def scenario() -> None:
        results = Results(store, None)  # type: ignore[arg-type]  # no worker is needed here
        job = succeeded_job(store, "j_1")
        note: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        results.storing("j_1", note)
        fetch = asyncio.create_task(results.path(job))
        await asyncio.sleep(0.05)
        assert not fetch.done()  # the worker has not said the file is there
        store.result_path("j_1").write_bytes(b"npz")
        note.set_result(None)
        assert await asyncio.wait_for(fetch, 5) == store.result_path("j_1")
        assert await asyncio.wait_for(results.path(job), 5) == store.result_path(
            "j_1"
        )  # nothing left to await
        assert "j_1" not in results._storing

    asyncio.run(scenario())
    store.close()


def test_a_result_the_worker_could_not_write_keeps_the_job_succeeded(tmp_path: Path) -> None:
    store = Store(tmp_path)

    async def scenario() -> None:
        results = Results(store, None)  # type: ignore[arg-type]
        succeeded_job(store, "j_2")
        note: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        results.storing("j_2", note)
        note.set_exception(OSError(28, "No space left on device"))
        await asyncio.sleep(0)
        job = store.get_job("j_2")
        assert job is not None and (job.status, job.error_type) == ("succeeded", None)
        assert "j_2" not in results._storing

    asyncio.run(scenario())
    store.close()
