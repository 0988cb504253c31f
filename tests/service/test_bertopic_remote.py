"""BERTopic with ``RemoteHDBSCAN`` against a live service: a machine without a GPU clusters on the
service's host (here a real uvicorn server on the CPU backend: the same engine, the same answers).
``fit_transform`` uploads the reduced embeddings and fits a resident model; ``transform`` asks it."""

from __future__ import annotations

import os

import numpy as np
import pytest

import gpu_core
from service.client import RemoteHDBSCAN

from .live import LiveServer

if os.environ.get("CI"):
    import bertopic
else:
    bertopic = pytest.importorskip("bertopic", reason="pip install --no-deps 'bertopic==0.17.4'")


def test_bertopic_with_remote_hdbscan(live: LiveServer) -> None:
    from bertopic.dimensionality import BaseDimensionalityReduction

    from tests.gpu_core.clustering.test_bertopic import WORDS, raw_embeddings

    docs, embeddings, truth = raw_embeddings(2, per_topic=60)
    remote = RemoteHDBSCAN(live.url, min_cluster_size=15, metric="cosine")
    topic_model = bertopic.BERTopic(umap_model=BaseDimensionalityReduction(), hdbscan_model=remote)
    topics, _ = topic_model.fit_transform(docs, embeddings)
    local = gpu_core.HDBSCAN(min_cluster_size=15, metric="cosine", backend="cpu").fit(embeddings)
    assert np.array_equal(remote.labels_, local.labels_)
    assert len(set(topics) - {-1}) == len(WORDS)
    for topic in set(topics) - {-1}:
        assert len(set(truth[np.asarray(topics) == topic])) == 1
    new_docs, new_embeddings, _ = raw_embeddings(3, per_topic=8)
    new_topics, _ = topic_model.transform(new_docs, new_embeddings)
    assert list(new_topics) == list(topic_model._map_predictions(local.predict(new_embeddings)))
    remote.delete()
