"""Storage: records in SQLite and the spool of payloads and results.

``store`` (the records and the spool's folders of one data dir), on ``records`` (a graph's and a
job's record, their ids) and ``spool`` (files being received, removals off the event loop);
``npzio`` (reading and writing ``.npz`` files fast, as the engine and the API read them).
"""
