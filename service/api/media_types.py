"""The media types the API reads and answers, named once for the routers, encoders and uploads."""

JSON_MEDIA_TYPE = "application/json"
#: errors (RFC 9457)
PROBLEM_JSON = "application/problem+json"
#: binary bodies: a graph file (``?format=``) in, an ``.npz`` result out
NPZ_MEDIA_TYPE = "application/octet-stream"
ARROW_STREAM_MEDIA_TYPE = "application/vnd.apache.arrow.stream"
PARQUET_MEDIA_TYPE = "application/vnd.apache.parquet"
