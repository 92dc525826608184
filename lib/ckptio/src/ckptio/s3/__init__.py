"""ckptio on object storage: `s3://bucket/prefix` locations through the AWS CRT (the optional extra `ckptio[s3]`).

location.py parses a location and reads its endpoint and credentials from the environment (no awscrt needed);
client.py holds the requests; transfer.py moves a checkpoint's bytes as the file backends do (a save composes
its object from the same write pieces and uploads it in parallel parts; a load reads its pieces by parallel
ranged GETs); store.py is a DCP checkpoint's store on objects (the Writer's and Reader's) and commit.py its
commit.
"""
