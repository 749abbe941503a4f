#!/usr/bin/env python3
"""Stalls a CPU now and then, as a host that takes a virtual CPU away does:
a realtime spinner at the top priority takes one CPU (chosen at random) for
STALL ms, at random intervals averaging about EVERY s. Nothing on that CPU
runs meanwhile, realtime delay lines included. Used to reproduce the CI
machine's stalls here (one CI run: an echo 10.3 ms late through a 35 ms
delay line); run it beside a timing test, as root, and stop it after:

    python3 scripts/experiment/steal.py 10 2 &   # STALL ms, EVERY s
    CI=true cargo test --profile ci -p delayline --test delay; kill %1
"""
import os, random, sys, time
stall = float(sys.argv[1]) / 1e3 if len(sys.argv) > 1 else 0.010
every = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(99))
n = os.cpu_count()
while True:
    time.sleep(random.uniform(0.2, 2 * every))
    os.sched_setaffinity(0, {random.randrange(n)})
    end = time.monotonic() + stall
    while time.monotonic() < end:
        pass
