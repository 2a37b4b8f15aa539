# A python tool cell (stateful: true) that floods the protocol pipe with 2 GB without a
# newline (bench/sandbox/flood_memory.sh). The pipe is a local of the driver's main(): `proto`.
import inspect, os
fd = next(f.frame.f_locals["proto"] for f in inspect.stack() if "proto" in f.frame.f_locals)
chunk = b"y" * (1 << 20)
for _ in range(2048):
    os.write(fd, chunk)
