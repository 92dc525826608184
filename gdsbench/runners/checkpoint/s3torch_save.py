"""s3torch_save: s3torchconnector's S3Checkpoint, torch.save into its writer (one multipart upload, completed when
the writer closes) and torch.load(weights_only=True) from its reader: one object a checkpoint, against an S3 endpoint
(the measured run, the objects and the conditions: s3torch.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gdsbench.cases import Case, Pattern
from gdsbench.runners import s3
from gdsbench.runners.checkpoint.s3torch import S3TorchRunner, client_config


class S3TorchSave(S3TorchRunner):
    """S3Checkpoint's writer/reader with torch.save / torch.load(weights_only=True)."""

    name = "s3torch_save"
    description = (
        "s3torchconnector's S3Checkpoint: torch.save into its writer, torch.load(weights_only=True) from "
        "its reader (S3)"
    )
    calls = {
        Pattern.SAVE: "torch.save(S3Checkpoint.writer)",
        Pattern.LOAD: "torch.load(S3Checkpoint.reader, weights_only=True)",
    }
    suffix = ".pt"

    def write(self, tensors: Mapping[str, Any], uri: str, case: Case) -> None:
        """torch.save into S3Checkpoint's writer."""
        import torch

        with _checkpoint(case).writer(uri) as writer:
            torch.save(dict(tensors), writer)

    def read(self, uri: str, case: Case, staged: Any) -> Mapping[str, Any]:
        """torch.load from S3Checkpoint's reader, weights only, onto the CPU."""
        import torch

        with _checkpoint(case).reader(uri) as reader:
            return torch.load(reader, map_location="cpu", weights_only=True)


def _checkpoint(case: Case) -> Any:
    """S3Checkpoint for the case's endpoint, region and client settings."""
    from s3torchconnector import S3Checkpoint

    return S3Checkpoint(region=case["region"], endpoint=s3.endpoint(case), s3client_config=client_config(case))


ENGINE = S3TorchSave()
