"""ckptio on object storage: `s3://bucket/prefix` locations through the AWS CRT (the optional extra `ckptio[s3]`).

location.py parses a location and reads its endpoint and credentials from the environment (no awscrt needed);
client.py holds the requests; transfer.py moves a checkpoint's bytes as the file backends do (a save composes
its object from the same write pieces and uploads it in parallel parts; a load reads its pieces by parallel
ranged GETs); single.py is a single-file checkpoint as one object. The DCP layer's store and commit on objects
are dcp/object_store.py and dcp/object_commit.py: this package knows nothing of DCP.
"""
