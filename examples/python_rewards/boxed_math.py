"""The quickstart's math reward as a Python `plain` function (docs/python-rewards.md).

Scores 1.0 when the completion's last \\boxed{...} holds the ground truth's number, else 0.0:
what the C++ `math` verifier decides on the quickstart's arithmetic answers (integers), in a
dozen lines of Python. `make demo PYTHON_REWARD=1` trains with it.
"""


def last_boxed(text):
    """Content of the last complete \\boxed{...} (nested braces) or "\\boxed 5" (up to the
    line's end or a '$'), or None: an unclosed box at a truncated end does not count."""
    found, start = None, text.find("\\boxed")
    while start >= 0:
        i = start + len("\\boxed")
        if text.startswith("{", i):
            depth = 0
            for j in range(i, len(text)):
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                if depth == 0:
                    found = text[i + 1:j]
                    break
        elif text.startswith(" ", i):
            rest = text[i + 1:].split("\n")[0].split("$")[0].strip()
            if rest:
                found = rest
        start = text.find("\\boxed", i)
    return found


def normalize(answer):
    answer = "".join(str(answer).split())
    while answer.startswith("{") and answer.endswith("}"):
        answer = answer[1:-1]
    return answer


def as_number(text):
    try:
        return float(str(text).strip().replace(",", "").rstrip("."))
    except ValueError:
        return None


def boxed_math(completion, ground_truth, **columns):
    answer = last_boxed(completion)
    if answer is None:
        return 0.0
    answer, ground_truth = normalize(answer), normalize(ground_truth)
    given, truth = as_number(answer), as_number(ground_truth)
    if given is not None and truth is not None:
        return 1.0 if abs(given - truth) <= 1e-9 * max(1.0, abs(truth)) else 0.0
    return 1.0 if answer == ground_truth else 0.0
