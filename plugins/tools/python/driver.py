# The python tool's persistent interpreter (stateful: true): runs the code cells the plugin
# (python_tool.cpp) sends, all in one namespace, so that what one call defines the next can use.
#
# Embedded in the plugin at build time and run in the sandbox as `python -I -B -c <this file>
# <json settings>`. The protocol is private to the pair and moved off the standard streams at
# start, as python_reward's driver does: a cell's fd 1 and fd 2 are two unlinked files in the
# sandbox's /tmp, read back after the cell, so print(), sys.stderr, os.write(1, ...) and child
# processes are all captured, and nothing a cell writes can be taken for the protocol; fd 0
# reads /dev/null.
#
#   plugin -> driver   {"code": "..."}                         one JSON line per cell
#   driver -> plugin   {"ready": true}                         once, when it can take cells
#                      {"out": head, "out_chars": n, "err": tail, "err_chars": n, "exit": status}
# per cell: the first `max_chars` characters of stdout, the last `max_chars` of stderr (where
# a traceback's last line says what went wrong) with the traceback of an uncaught exception
# appended, and each stream's full length in characters; exit is 0, 1 for an uncaught
# exception, or SystemExit's status.
# The files live in the sandbox's /tmp, so a flood is bounded by tmp_mb: the write that finds
# /tmp full fails inside the cell (OSError), and the files are emptied after every cell.
import codecs
import io
import json
import linecache
import os
import sys
import tempfile
import traceback

_PID = os.getpid()
_CHUNK = 1 << 20


def _protocol_streams():
    in_fd = os.dup(0)   # os.dup: not inherited by the cell's children
    out_fd = os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return os.fdopen(in_fd, "rb", buffering=1 << 16), out_fd


def _send(fd, obj):
    view = memoryview((json.dumps(obj, ensure_ascii=False) + "\n").encode("utf-8", "replace"))
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _text_stream(fd):
    return io.TextIOWrapper(io.BufferedWriter(io.FileIO(fd, "w", closefd=False)), encoding="utf-8",
                            errors="backslashreplace", write_through=True)


def _read_back(fd, max_chars, tail):
    """The first (or, with tail, last) max_chars characters of the capture file and its length
    in characters; empties the file."""
    size = os.lseek(fd, 0, os.SEEK_END)
    window = 4 * max_chars + 4  # UTF-8: enough bytes for max_chars + 1 characters
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    os.lseek(fd, 0, os.SEEK_SET)
    kept, total = "", 0
    while True:
        chunk = os.read(fd, _CHUNK)
        text = decoder.decode(chunk, final=not chunk)
        total += len(text)
        if not tail and len(kept) < max_chars:
            kept += text[:max_chars - len(kept)]
        if not chunk:
            break
    if tail:
        start = max(0, size - window)
        kept = os.pread(fd, size - start, start).decode("utf-8", "replace")[-max_chars:]
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    return kept, total


def _traceback(exc):
    # The cell's frames only: this driver runs as "<string>" (python -c).
    te = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    te.stack = traceback.StackSummary.from_list([f for f in te.stack if f.filename != "<string>"])
    return "".join(te.format())


def _run_cell(code, index, namespace):
    """Runs one cell; returns (exit status, the traceback of what it raised or "")."""
    name = "<cell %d>" % index
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)  # tracebacks show the lines
    try:
        exec(compile(code, name, "exec"), namespace)
        return 0, ""
    except SystemExit as e:
        if e.code is None or e.code == 0:
            return 0, ""
        if isinstance(e.code, int):
            return e.code, ""
        return 1, "%s\n" % (e.code,)
    except BaseException as e:  # KeyboardInterrupt included: the cell's, not the driver's
        return 1, _traceback(e)


def main():
    settings = json.loads(sys.argv[1])
    max_chars = int(settings["max_chars"])
    requests, proto = _protocol_streams()
    captures = [tempfile.TemporaryFile(dir="/tmp", buffering=0) for _ in range(2)]
    out_fd, err_fd = (f.fileno() for f in captures)
    stdout, stderr = _text_stream(1), _text_stream(2)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    if "" in sys.path:
        sys.path.remove("")
    _send(proto, {"ready": True})
    index = 0
    for line in requests:
        index += 1
        cell = json.loads(line)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        if stdout.closed:
            stdout = _text_stream(1)
        if stderr.closed:
            stderr = _text_stream(2)
        sys.stdout, sys.stderr = stdout, stderr
        status, tb = _run_cell(cell["code"], index, namespace)
        if os.getpid() != _PID:  # a child the cell forked must not carry on as the driver
            os._exit(0)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        out, out_chars = _read_back(out_fd, max_chars, tail=False)
        err, err_chars = _read_back(err_fd, max_chars, tail=True)
        if tb:
            if err and not err.endswith("\n"):
                tb = "\n" + tb
            err, err_chars = (err + tb)[-max_chars:], err_chars + len(tb)
        _send(proto, {"out": out, "out_chars": out_chars, "err": err, "err_chars": err_chars, "exit": status})


if __name__ == "__main__":
    main()
