"""BERTopic 0.17.4 with ``gpu_core.HDBSCAN`` as its ``hdbscan_model``: a real client of the estimator.

BERTopic treats a model that is neither the hdbscan library's nor cuML's generically: ``fit(X,
y=y)``, ``labels_``, ``probabilities_`` (used as the documents' probabilities, with or without
``calculate_probabilities``), and ``predict`` for new documents in ``transform`` (which then
returns no probabilities). Precomputed embeddings (synthetic, clustered by topic) and a PCA in
place of UMAP keep it fast. BERTopic is installed by the README's test command with --no-deps
(its declared dependencies pull in torch); in CI its absence fails the test, elsewhere it skips.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import gpu_core

if os.environ.get("CI"):
    import bertopic
else:
    bertopic = pytest.importorskip("bertopic", reason="pip install --no-deps 'bertopic==0.17.4'")

WORDS = {
    0: "rocket orbit launch satellite moon mars astronaut",
    1: "goal striker match league keeper penalty stadium",
    2: "recipe oven flour butter sugar bake dough",
    3: "vote senate election ballot campaign policy law",
}


def corpus(seed: int, per_topic: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 1, size=(len(WORDS), 32)) * 6
    docs, embeddings, topics = [], [], []
    for topic, words in WORDS.items():
        vocab = words.split()
        for _ in range(per_topic):
            docs.append(" ".join(rng.choice(vocab, size=6)))
            embeddings.append(centres[topic] + rng.normal(0, 1, size=32))
            topics.append(topic)
    return docs, np.array(embeddings), np.array(topics)


@pytest.mark.parametrize("probabilities", [False, True])
def test_bertopic_fits_and_transforms_through_the_estimator(probabilities: bool) -> None:
    from sklearn.decomposition import PCA

    docs, embeddings, truth = corpus(0, per_topic=80)
    model = gpu_core.HDBSCAN(min_cluster_size=15, backend="cpu")
    topic_model = bertopic.BERTopic(
        umap_model=PCA(n_components=5, random_state=0),
        hdbscan_model=model,
        calculate_probabilities=probabilities,
    )
    topics, probs = topic_model.fit_transform(docs, embeddings)
    assert topic_model.hdbscan_model is model
    # BERTopic's topics are our labels renumbered by size (-1 stays -1)
    assert np.array_equal(np.asarray(topics), topic_model._map_predictions(model.labels_))
    assert len(set(topics) - {-1}) == len(WORDS)
    for topic in set(topics) - {-1}:  # each found topic is one of the corpus's
        assert len(set(truth[np.asarray(topics) == topic])) == 1
    assert np.allclose(probs, model.probabilities_)  # the generic path: probabilities_
    new_docs, new_embeddings, _ = corpus(1, per_topic=10)
    new_topics, new_probs = topic_model.transform(new_docs, new_embeddings)
    assert new_probs is None  # BERTopic asks a generic model for predict() only
    reduced = topic_model.umap_model.transform(new_embeddings)
    assert list(new_topics) == list(topic_model._map_predictions(model.predict(reduced)))
    assert np.mean(np.asarray(new_topics) >= 0) > 0.8
    info = topic_model.get_topic_info()
    assert set(info["Topic"]) >= set(new_topics) - {-1}


def raw_embeddings(seed: int, per_topic: int, dims: int = 384) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Sentence-embedding-like vectors: one direction per topic, each document's vector that direction
    at a norm of its own (0.3 to 5, as lengths of real embeddings vary) plus noise. Cosine sees the
    topics; Euclidean distance mostly sees the norms."""
    directions = np.random.default_rng(100).normal(size=(len(WORDS), dims))  # the topics: every corpus's
    rng = np.random.default_rng(seed)
    docs, embeddings, topics = [], [], []
    for topic, words in WORDS.items():
        vocab = words.split()
        for _ in range(per_topic):
            docs.append(" ".join(rng.choice(vocab, size=6)))
            vector = directions[topic] + rng.normal(0, 0.35, size=dims)
            embeddings.append(vector * rng.uniform(0.3, 5.0) / np.linalg.norm(vector))
            topics.append(topic)
    return docs, np.array(embeddings), np.array(topics)


def test_bertopic_clusters_raw_embeddings_by_cosine() -> None:
    """``HDBSCAN(metric="cosine")`` on the raw 384-coordinate embeddings (no reduction:
    BERTopic's identity ``BaseDimensionalityReduction``), ``fit_transform`` then ``transform``."""
    from bertopic.dimensionality import BaseDimensionalityReduction

    docs, embeddings, truth = raw_embeddings(0, per_topic=80)
    model = gpu_core.HDBSCAN(min_cluster_size=15, metric="cosine", backend="cpu")
    topic_model = bertopic.BERTopic(umap_model=BaseDimensionalityReduction(), hdbscan_model=model)
    topics, _ = topic_model.fit_transform(docs, embeddings)
    assert len(set(topics) - {-1}) == len(WORDS)
    for topic in set(topics) - {-1}:
        assert len(set(truth[np.asarray(topics) == topic])) == 1
    assert np.mean(np.asarray(topics) >= 0) > 0.9
    new_docs, new_embeddings, new_truth = raw_embeddings(1, per_topic=10)
    new_topics, _ = topic_model.transform(new_docs, new_embeddings)
    assert list(new_topics) == list(topic_model._map_predictions(model.predict(new_embeddings)))
    found = np.asarray(new_topics)
    assert np.mean(found >= 0) > 0.8
    fitted_topic_of = {int(t): int(truth[np.asarray(topics) == t][0]) for t in set(topics) - {-1}}
    assert all(fitted_topic_of[int(t)] == int(k) for t, k in zip(found, new_truth, strict=True) if t >= 0)
    # Euclidean distance on the same raw vectors sees their norms: not the topics
    euclidean = gpu_core.HDBSCAN(min_cluster_size=15, backend="cpu").fit(embeddings)
    assert len(set(euclidean.labels_) - {-1}) != len(WORDS) or np.mean(euclidean.labels_ >= 0) < 0.9
