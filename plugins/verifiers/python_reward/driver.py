# The python_reward worker: imports one reward function once, then scores batches of rows
# sent by the plugin (python_reward.cpp) as JSON lines, until its input closes.
#
# Embedded in the plugin at build time and run as `python -B -c <this file> <json settings>`.
# The protocol is private to the pair: the worker moves it off the standard streams at start,
# so the reward function may print (verl's own gsm8k reward prints 1 row in 64) or read stdin
# without breaking it: fd 1 becomes a copy of stderr (the run log), fd 0 reads /dev/null.
#
#   plugin -> worker   {"id": N, "rows": [{"c": completion, "g": ground truth, "l": label,
#                       "p": prompt, "m": {other columns}}, ...]}
#   worker -> plugin   {"ready": true, ...} once imported, or {"fatal": message, "tb": traceback}
#                      then, per batch: one line per row as soon as it is scored
#                        {"i": k, "s": score [, "d": {details}]}
#                        {"i": k, "none": true}                 TRL's "not applicable"
#                        {"i": k, "nonfinite": "nan"}           NaN / inf (the host fails it)
#                        {"i": k, "error": "Type: message", "where": "file:line", "tb": "..."}
#                      or, for a TRL call that raised, {"batch_error": ..., "where", "tb"};
#                      then {"done": N}.
# One line per row, written when the row is done: a row that hangs or kills the interpreter is
# the first one the plugin has no answer for, and only that row is blamed. A line is at most
# settings["max_line_bytes"]: an answer that would be longer is cut to fit (details replaced by
# a note, message and traceback clipped), since the plugin takes a longer line for a flood of
# the protocol channel and restarts the worker.
import importlib
import importlib.util
import inspect
import json
import math
import numbers
import os
import sys
import traceback


def _protocol_streams():
    out_fd = os.dup(1)
    in_fd = os.dup(0)
    os.dup2(2, 1)  # print() and os.write(1, ...) of the reward go to the log
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdout = sys.stderr
    return os.fdopen(in_fd, "rb", buffering=1 << 16), out_fd


_PID = os.getpid()
_MAX_LINE = 1 << 20  # bytes of one protocol line; main() sets the plugin's limit
_MAX_MESSAGE, _MAX_TB = 2000, 16000  # characters kept of a message, of a traceback, when cut


def _guard_fork():
    """A child the reward function forked must not carry on as the worker."""
    if os.getpid() != _PID:
        os._exit(0)


def _encode(obj):
    try:
        text = json.dumps(obj, ensure_ascii=False, default=repr, allow_nan=False)
    except ValueError:  # NaN or infinity in a verl dict's details: JSON has none, send them as text
        try:
            text = json.dumps(json.loads(json.dumps(obj, default=repr), parse_constant=str), ensure_ascii=False)
        except (TypeError, ValueError) as e:  # a circular reference
            text = None
            why = e
    except TypeError as e:  # keys that are not strings
        text, why = None, e
    if text is None:
        details = obj.pop("d", None)
        obj["d"] = {"unserializable_details": "%s: %s" % (why, repr(details)[:200])}
        text = json.dumps(obj, ensure_ascii=False, default=repr, allow_nan=False)
    return (text + "\n").encode("utf-8", "replace")


def _fit(obj):
    """The answer cut to fit one protocol line: details replaced by a note, the message and the
    traceback clipped (each JSON-escaped character takes at most 6 bytes: far below the limit)."""
    if "d" in obj:
        obj["d"] = {"details_dropped": "the details took more than the %d bytes of one answer" % _MAX_LINE}
    for key in ("error", "batch_error", "fatal", "where"):
        if isinstance(obj.get(key), str) and len(obj[key]) > _MAX_MESSAGE:
            obj[key] = obj[key][:_MAX_MESSAGE] + "...[cut]"
    if isinstance(obj.get("tb"), str) and len(obj["tb"]) > _MAX_TB:
        obj["tb"] = "...[cut]" + obj["tb"][-_MAX_TB:]
    return obj


def _send(fd, obj):
    data = _encode(obj)
    if len(data) > _MAX_LINE:
        data = _encode(_fit(obj))
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _driver_frame(filename):
    # This driver runs as "<string>" (python -c); importlib's frames are "<frozen ...>".
    return filename == "<string>" or filename.startswith("<frozen ")


def _where(exc, fn=None):
    """file:line of the innermost frame that is not the driver's. What the driver raised about
    the function itself (a TRL list of the wrong length, arguments it cannot take) is placed
    at the function's definition: never at a line of this driver."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not _driver_frame(f.filename)]
    if frames:
        return "%s:%d" % (os.path.basename(frames[-1].filename), frames[-1].lineno)
    try:
        code = inspect.unwrap(fn).__code__
        return "%s:%d" % (os.path.basename(code.co_filename), code.co_firstlineno)
    except Exception:  # no function yet (start-up), or a builtin / C function
        return ""


class _Unusable(Exception):
    """The function cannot be used as configured: a message, no traceback."""


def _traceback(exc):
    # The user's frames only: this driver runs as "<string>" (python -c).
    te = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    te.stack = traceback.StackSummary.from_list([f for f in te.stack if not _driver_frame(f.filename)])
    return "".join(te.format())


def _error(exc, fn=None):
    return {"error": "%s: %s" % (type(exc).__name__, exc), "where": _where(exc, fn), "tb": _traceback(exc)}


def _load(settings):
    if settings.get("path"):
        path = settings["path"]
        folder = os.path.dirname(os.path.abspath(path))
        if folder not in sys.path:
            sys.path.insert(0, folder)  # sibling modules of the reward file import as usual
        # A private module name: a reward file called math.py must not stand in for the
        # standard library's math while it (or sympy, fractions, ...) imports.
        name = "_grpo_reward_" + os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError("cannot import %s: not a Python source file" % path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        where = path
    else:
        module = importlib.import_module(settings["module"])
        where = "module " + settings["module"]
    fn = getattr(module, settings["function"], None)
    if fn is None:
        raise _Unusable("%s has no function %r (it defines: %s)" % (
            where, settings["function"],
            ", ".join(sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))) or "nothing callable"))
    if not callable(fn):
        raise _Unusable("%s.%s is a %s, not a function" % (where, settings["function"], type(fn).__name__))
    return fn


def _check_signature(fn, signature):
    """What each anchor passes must bind, or the function cannot be called at all."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # a builtin or C function: nothing to check
    try:
        if signature == "plain":
            sig.bind("completion", "ground_truth")
        elif signature == "verl":
            sig.bind(data_source="", solution_str="", ground_truth="", extra_info={})
        else:
            params = sig.parameters.values()
            if not any(p.kind == p.VAR_KEYWORD for p in params) and "completions" not in sig.parameters:
                raise TypeError("it takes no 'completions' argument")
    except TypeError as e:
        calls = {"plain": "f(completion, ground_truth, **columns)",
                 "verl": "f(data_source=..., solution_str=..., ground_truth=..., extra_info=...)",
                 "trl": "f(prompts=[...], completions=[...], **columns)"}
        raise _Unusable("the function cannot be called as signature '%s' calls it, %s: %s; it is %s%s" % (
            signature, calls[signature], e, getattr(fn, "__name__", "the function"), sig)) from None


def _as_score(value):
    """(score, error): a real number, or why the value is not one."""
    if isinstance(value, bool):
        return float(value), None
    if isinstance(value, (str, bytes, dict, list, tuple)) or value is None:
        text = repr(value)
        return None, "returned %s %s, expected a number" % (type(value).__name__, text[:80])
    if isinstance(value, numbers.Real) or hasattr(value, "__float__"):
        try:
            return float(value), None
        except Exception as e:  # a multi-element array, say
            return None, "returned %s that is not one number: %s" % (type(value).__name__, e)
    return None, "returned %s, expected a number" % type(value).__name__


def _row_result(i, value, signature):
    if value is None and signature == "trl":
        return {"i": i, "none": True}
    details = None
    if signature == "verl" and isinstance(value, dict):
        if "score" not in value:
            return {"i": i, "error": "returned a dict without a 'score' key (keys: %s)" % ", ".join(map(str, value))}
        details = {k: v for k, v in value.items() if k != "score"}
        value = value["score"]
    score, why = _as_score(value)
    if why:
        return {"i": i, "error": why}
    if not math.isfinite(score):
        return {"i": i, "nonfinite": repr(score)}
    out = {"i": i, "s": score}
    if details:
        out["d"] = details
    return out


def _score_rows(fn, signature, rows, out_fd, ground_truth_key, completions_as):
    if signature == "trl":
        columns = []
        for row in rows:
            for key in row["m"]:
                if key not in columns:
                    columns.append(key)
        kwargs = {key: [row["m"].get(key) for row in rows] for key in columns}
        kwargs[ground_truth_key] = [row["g"] for row in rows]
        completions = [row["c"] for row in rows]
        if completions_as == "messages":
            completions = [[{"role": "assistant", "content": c}] for c in completions]
        try:
            values = fn(prompts=[row["p"] for row in rows], completions=completions, **kwargs)
            if not isinstance(values, (list, tuple)) and hasattr(values, "tolist"):
                values = values.tolist()  # a numpy array or a tensor
            if not isinstance(values, (list, tuple)) or len(values) != len(rows):
                raise TypeError("a TRL reward function returns a list of %d scores (one per completion), got %s" % (
                    len(rows), type(values).__name__ if not isinstance(values, (list, tuple)) else
                    "a list of %d" % len(values)))
        except BaseException as e:  # SystemExit, KeyboardInterrupt, func_timeout's: the call's, not ours
            err = _error(e, fn)
            _send(out_fd, {"batch_error": err["error"], "where": err["where"], "tb": err["tb"]})
            return
        _guard_fork()
        for i, value in enumerate(values):
            _send(out_fd, _row_result(i, value, signature))
        return
    for i, row in enumerate(rows):
        try:
            if signature == "plain":
                value = fn(row["c"], row["g"], **row["m"])
            else:
                extra_info = row["m"].get("extra_info")
                value = fn(data_source=row["l"], solution_str=row["c"], ground_truth=row["g"],
                           extra_info=extra_info if extra_info is not None else {})
            result = _row_result(i, value, signature)
        except BaseException as e:  # SystemExit, KeyboardInterrupt, func_timeout's: the row's, not ours
            result = dict(_error(e, fn), i=i)
        _guard_fork()
        _send(out_fd, result)


def main():
    global _MAX_LINE
    settings = json.loads(sys.argv[1])
    _MAX_LINE = int(settings.get("max_line_bytes", _MAX_LINE))
    requests, out_fd = _protocol_streams()
    if "" in sys.path:
        sys.path.remove("")  # -c puts the working directory first; the reward's folder goes there
    for folder in reversed(settings.get("python_path", [])):
        sys.path.insert(0, folder)
    try:
        fn = _load(settings)
        _check_signature(fn, settings["signature"])
    except _Unusable as e:
        _send(out_fd, {"fatal": str(e), "tb": ""})
        os._exit(2)
    except BaseException as e:
        err = _error(e)
        _send(out_fd, {"fatal": err["error"], "tb": err["tb"]})
        sys.stderr.flush()
        os._exit(2)
    _send(out_fd, {"ready": True, "pid": os.getpid(), "python": sys.version.split()[0]})
    signature = settings["signature"]
    ground_truth_key = settings.get("ground_truth_key", "ground_truth")
    completions_as = settings.get("completions_as", "text")
    for line in requests:
        batch = json.loads(line)
        _score_rows(fn, signature, batch["rows"], out_fd, ground_truth_key, completions_as)
        sys.stderr.flush()
        _send(out_fd, {"done": batch["id"]})


if __name__ == "__main__":
    main()
