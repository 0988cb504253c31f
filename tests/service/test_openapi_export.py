"""openapi/openapi.json is generated from the app and must not drift; binary media types are documented."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service import openapi_export

OPERATIONS = {
    ("post", "/v1/graphs"): "createGraph",
    ("get", "/v1/graphs"): "listGraphs",
    ("get", "/v1/graphs/{graph_id}"): "getGraph",
    ("delete", "/v1/graphs/{graph_id}"): "deleteGraph",
    ("post", "/v1/graphs/{graph_id}/mst"): "submitMstJob",
    ("post", "/v1/graphs/{graph_id}/jobs"): "submitJob",
    ("put", "/v1/graphs/{graph_id}/weights"): "replaceWeights",
    ("patch", "/v1/graphs/{graph_id}/weights"): "updateWeights",
    ("post", "/v1/points"): "createPointSet",
    ("get", "/v1/points"): "listPointSets",
    ("get", "/v1/points/{points_id}"): "getPointSet",
    ("delete", "/v1/points/{points_id}"): "deletePointSet",
    ("post", "/v1/points/{points_id}/jobs"): "submitPointsJob",
    ("post", "/v1/points/{points_id}/models"): "createModel",
    ("get", "/v1/points/{points_id}/models"): "listModels",
    ("get", "/v1/points/{points_id}/models/{model_id}"): "getModel",
    ("delete", "/v1/points/{points_id}/models/{model_id}"): "deleteModel",
    ("post", "/v1/points/{points_id}/models/{model_id}/predict"): "predictWithModel",
    ("get", "/v1/jobs/{job_id}"): "getJob",
    ("get", "/v1/jobs/{job_id}/result"): "getJobResult",
    ("delete", "/v1/jobs/{job_id}"): "cancelJob",
    ("post", "/v1/mst"): "computeMst",
    ("get", "/healthz"): "healthz",
    ("get", "/readyz"): "readyz",
    ("get", "/metrics"): "metrics",
}


@pytest.fixture(scope="module")
def spec() -> dict:
    return json.loads(openapi_export.render())


def test_committed_file_is_up_to_date() -> None:
    assert openapi_export.DEFAULT_PATH.read_text() == openapi_export.render(), (
        "openapi/openapi.json is stale: run python -m service.openapi_export"
    )
    assert openapi_export.main(["--check"]) == 0


def test_check_mode_fails_on_drift(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stale = tmp_path / "openapi.json"
    stale.write_text(openapi_export.render().replace("createGraph", "uploadGraph"))
    assert openapi_export.main(["--check", "--output", str(stale)]) == 1
    assert "uploadGraph" in capsys.readouterr().out
    assert openapi_export.main(["--output", str(stale)]) == 0
    assert openapi_export.main(["--check", "--output", str(stale)]) == 0


def test_exactly_the_routes_of_the_design_with_stable_operation_ids(spec: dict) -> None:
    found = {(m, p): op["operationId"] for p, ops in spec["paths"].items() for m, op in ops.items()}
    assert found == OPERATIONS


def test_binary_media_types_are_documented(spec: dict) -> None:
    paths = spec["paths"]
    for path in ("/v1/graphs", "/v1/mst"):
        content = paths[path]["post"]["requestBody"]["content"]
        assert content["application/octet-stream"]["schema"] == {"type": "string", "format": "binary"}
        assert content["application/json"]["schema"] == {"$ref": "#/components/schemas/GraphUpload"}
        for arrow in ("application/vnd.apache.arrow.stream", "application/vnd.apache.parquet"):
            assert content[arrow]["schema"] == {"type": "string", "format": "binary"}
    for path, method in (("/v1/jobs/{job_id}/result", "get"), ("/v1/mst", "post")):
        responses = paths[path][method]["responses"]
        assert set(responses["200"]["content"]) == {
            "application/json",
            "application/octet-stream",
            "application/vnd.apache.arrow.stream",
        }
        assert "406" in responses
    formats = next(p for p in paths["/v1/graphs"]["post"]["parameters"] if p["name"] == "format")
    assert "npz" in json.dumps(formats)
    assert "GraphUpload" in spec["components"]["schemas"]
    for method, schema in (("put", "WeightsUpload"), ("patch", "WeightsPatch")):
        content = paths["/v1/graphs/{graph_id}/weights"][method]["requestBody"]["content"]
        assert content["application/json"]["schema"] == {"$ref": f"#/components/schemas/{schema}"}
        assert schema in spec["components"]["schemas"]


def test_errors_are_documented_as_problem_json(spec: dict) -> None:
    responses = spec["paths"]["/v1/graphs/{graph_id}"]["get"]["responses"]
    assert set(responses["404"]["content"]) == {"application/problem+json"}
    assert responses["404"]["content"]["application/problem+json"]["schema"] == {
        "$ref": "#/components/schemas/Problem"
    }
    assert spec["paths"]["/v1/graphs"]["post"]["responses"]["201"]
    assert spec["paths"]["/v1/graphs/{graph_id}/mst"]["post"]["responses"]["202"]
