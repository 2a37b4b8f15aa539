"""Reward functions that flood the host with output (bench/sandbox/flood_memory.sh): the host
must hold a bounded amount of what a worker writes, whatever it writes."""
import inspect
import os

MB = 1 << 20


def trivial(completion, ground_truth, **columns):
    return 1.0


def flood_stdout(completion, ground_truth, **columns):
    """1 GB on file descriptor 1 (the run log's pipe), without a newline."""
    chunk = b"y" * MB
    for _ in range(1024):
        os.write(1, chunk)
    return 1.0


def _protocol_fd():
    # The driver's own answer channel: a local of its frames (out_fd, python_reward's driver).
    for frame in inspect.stack():
        if "out_fd" in frame.frame.f_locals:
            return frame.frame.f_locals["out_fd"]
    raise RuntimeError("no protocol fd found")


def flood_protocol(completion, ground_truth, **columns):
    """2 GB into the protocol pipe, without a newline."""
    fd, chunk = _protocol_fd(), b"y" * MB
    for _ in range(2048):
        os.write(fd, chunk)
    return 1.0
