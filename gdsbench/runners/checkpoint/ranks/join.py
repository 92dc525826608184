"""How a rank joins its job's process group talking only to its own job's store.

A TCPStore has no access control: any local user can bind a port first, or connect to a store and write keys.
A launch started by gdsbench hands its ranks a secret in their environment (launchers.SECRET_VARIABLE); from it
every rank derives a key namespace no one else can name (a store cannot be listed) and a proof: rank 0 writes the
proof into the store it knows is its own (it bound the port itself, or its torchrun agent did), every other rank
reads it before using the store and refuses one whose proof does not match. Where rank 0 hosts the store (srun,
mpirun), it binds the rendezvous address itself, so a port someone else holds is a named failure, never a
connection. A rank started by hand (no secret) joins through env:// as torch does.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import os
import socket

import torch.distributed as dist

from gdsbench.errors import GdsbenchError
from gdsbench.launchers.base import SECRET_VARIABLE

PROOF_KEY = "proof"


class RendezvousError(GdsbenchError):
    """The store a rank reached is not its launch's: a port held by someone else, a proof that does not match."""


def namespace(secret: str) -> str:
    """The launch's key prefix: unguessable without the secret, and no proof of it."""
    return "gdsbench-" + hashlib.sha256(b"gdsbench keys\0" + secret.encode()).hexdigest()[:32]


def proof(secret: str) -> bytes:
    """What rank 0 writes and the others check: an HMAC of the secret, which the namespace does not reveal."""
    return hmac.new(secret.encode(), b"gdsbench rendezvous proof", hashlib.sha256).hexdigest().encode()


def join(backend: str, timeout: datetime.timedelta) -> None:
    """Join the process group: under the launch's secret where it has one, else through env:// as torch does."""
    secret = os.environ.pop(SECRET_VARIABLE, "")  # gone from this rank's environment once read
    if not secret:
        dist.init_process_group(backend, timeout=timeout)
        return
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    keys = dist.PrefixStore(namespace(secret), store(host, port, rank, world, timeout))
    if rank == 0:
        keys.set(PROOF_KEY, proof(secret).decode())
    elif not hmac.compare_digest(keys.get(PROOF_KEY), proof(secret)):
        raise RendezvousError(f"the store at {host}:{port} is not this launch's (its proof does not match): refused")
    dist.init_process_group(backend, store=keys, rank=rank, world_size=world, timeout=timeout)


def store(host: str, port: int, rank: int, world: int, timeout: datetime.timedelta) -> dist.TCPStore:
    """The job's store: a client of the torchrun agent's, or of rank 0's; rank 0 hosts it where no agent does,
    on the address it bound itself."""
    if rank != 0 or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return dist.TCPStore(host, port, world, False, timeout)
    listener = bind(host, port)
    return dist.TCPStore(host, port, world, True, timeout, master_listen_fd=listener.detach())


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on the rendezvous address; RendezvousError where another process holds the port."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        listener = socket.socket(family, kind, proto)
    except OSError as exc:
        raise RendezvousError(f"rendezvous address {host}:{port}: {exc.strerror or exc}") from None
    try:
        listener.bind(address)
        listener.listen(128)
    except OSError as exc:
        listener.close()
        raise RendezvousError(
            f"rendezvous port {host}:{port} is held by another process ({exc.strerror}): refused, never connected"
        ) from None
    return listener
