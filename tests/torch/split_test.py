"""tessera.split.apportion (the speed split of HeteroDistributedSampler), without torch: every split sums
to the batch, gives each rank at least one sample, has the shortest step of all integer splits (checked by
brute force on small cases) and stays within one sample of the exact proportion; bad input is refused."""
import itertools
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from tessera.split import apportion  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def step_time(parts, w):
    return max(n / x for n, x in zip(parts, w))


cases = [(64, [0.5721, 1.0]), (64, [0.5994, 1.0]), (32, [0.5994, 1.0]), (10, [1, 1, 1]), (7, [1, 2, 4]),
         (13, [0.3, 1, 1]), (5, [0.01, 1]), (9, [3, 1, 1, 1]), (20, [0.25, 0.5, 0.75, 1.0])]
for total, w in cases:
    parts = apportion(total, w)
    check(sum(parts) == total and min(parts) >= 1, f"{total} {w}: {parts} does not sum or has an empty rank")
    best = min(step_time(p, w) for p in itertools.product(range(1, total + 1), repeat=len(w)) if sum(p) == total)
    check(abs(step_time(parts, w) - best) < 1e-12, f"{total} {w}: {parts} step {step_time(parts, w)} > best {best}")
    exact = [total * x / sum(w) for x in w]
    check(all(abs(n - e) <= 1 or n == 1 for n, e in zip(parts, exact)), f"{total} {w}: {parts} far from {exact}")

# The case that made the old largest-remainder split (one sample each first) give 24:40 for 23.3 : 40.7.
check(apportion(64, [0.5721, 1.0]) == [23, 41], f"64 at 0.5721:1 gave {apportion(64, [0.5721, 1.0])}")
check(apportion(10, [1, 1, 1]) == [4, 3, 3], "ties go to the lower rank")
check(apportion(3, [1, 1, 1]) == [1, 1, 1], "one sample each when the batch equals the ranks")

for bad, needle in [((2, [1, 1, 1]), "cannot give each of 3 ranks"), ((8, [1, 0]), "positive"),
                    ((8, [1, float("nan")]), "positive"), ((8, []), "no ranks"), ((8.0, [1]), "integer"),
                    ((8, [1, "2"]), "positive")]:
    try:
        apportion(*bad)
        failures.append(f"apportion{bad} did not raise")
    except ValueError as e:
        check(needle in str(e), f"apportion{bad}: {e!r} does not say {needle!r}")

if failures:
    print("\n".join("FAIL " + f for f in failures))
    sys.exit(1)
print(f"split_test: {len(cases)} splits optimal and proportional, 6 bad inputs refused")
