#!/usr/bin/env python3
"""Checks every #include "dir/..." under src/ against tests/layering/layers.txt.

  check_layers.py [--src DIR] [--layers FILE]   exit 1 and list each forbidden edge
  check_layers.py --self-test                   shows that the check catches forbidden edges

A file's layer is its first directory under src/ ("." for src/main.cc). Test files (a name with
"_test" in it) may also include testing/. Only quoted includes whose first path part is a
directory of src/ count: system headers and generated headers of the same name are not edges.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/[^"]*"', re.M)


def read_layers(path):
    layers = {}
    with open(path, encoding='utf-8') as f:
        for n, line in enumerate(f, 1):
            line = line.split('#', 1)[0].strip()
            if not line:
                continue
            name, sep, deps = line.partition(':')
            if not sep or not name.strip():
                sys.exit(f'{path}:{n}: expected "DIR: DEP DEP ..."')
            layers[name.strip()] = set(deps.split())
    return layers


def is_test(filename):
    return '_test' in filename


def check(src, layers):
    """Returns (edges checked, list of violation lines)."""
    dirs = {d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d))}
    problems, edges = [], 0
    for unknown in sorted(dirs - set(layers)):
        problems.append(f'src/{unknown}/: a directory that layers.txt does not name')
    for dirpath, _, files in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        layer = rel.split(os.sep)[0]
        for name in sorted(files):
            if not name.endswith(('.h', '.cc', '.h.in')):
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding='utf-8', errors='replace') as f:
                text = f.read()
            allowed = layers.get(layer, set())
            for m in INCLUDE.finditer(text):
                dep = m.group(1)
                if dep not in dirs or dep == layer:
                    continue
                edges += 1
                if '*' in allowed or dep in allowed or (dep == 'testing' and is_test(name)):
                    continue
                line = text.count('\n', 0, m.start()) + 1
                problems.append(f'src/{os.path.relpath(path, src)}:{line}: {layer} -> {dep} is not in '
                                f'layers.txt ({layer} may include: {" ".join(sorted(allowed)) or "nothing"})')
    return edges, problems


def self_test(layers_path):
    """The check passes on a copy of src/ and fails on each forbidden edge added to it."""
    forbidden = [  # (file to add the include to, the include): the edges the graph exists to stop
        ('core/policy.cc', 'http/server.h'),
        ('core/fleet.h', 'gateway/gateway.h'),
        ('engine_model/kv_cache.cc', 'zmq/socket.h'),
        ('engine/engine_server.cc', 'gateway/gateway.h'),
        ('gateway/gateway.cc', 'engine/engine_server.h'),
        ('sim/simulator.cc', 'gateway/config.h'),
        ('sim/simulator.cc', 'http/server.h'),
        ('api/error.cc', 'metrics/metrics.h'),
        ('gateway/status.cc', 'testing/fake_upstream.h'),  # test support in a non-test file
    ]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, 'src')
        shutil.copytree(os.path.join(ROOT, 'src'), copy,
                        ignore=shutil.ignore_patterns('*.sh', '*.html', '*.txt', '*.in'))
        script = os.path.abspath(__file__)
        base = subprocess.run([sys.executable, script, '--src', copy, '--layers', layers_path],
                              capture_output=True, text=True)
        if base.returncode != 0:
            print('FAIL: the unmodified copy of src/ does not pass:\n' + base.stdout + base.stderr)
            return 1
        for target, include in forbidden:
            path = os.path.join(copy, target)
            with open(path, encoding='utf-8') as f:
                original = f.read()
            with open(path, 'a', encoding='utf-8') as f:
                f.write(f'\n#include "{include}"\n')
            r = subprocess.run([sys.executable, script, '--src', copy, '--layers', layers_path],
                               capture_output=True, text=True)
            edge = f'{target.split("/")[0]} -> {include.split("/")[0]}'
            if r.returncode == 1 and f'src/{target}:' in r.stdout and edge in r.stdout:
                print(f'ok: adding #include "{include}" to src/{target} fails ({edge})')
            else:
                print(f'FAIL: adding #include "{include}" to src/{target} was not caught '
                      f'(exit {r.returncode}):\n{r.stdout}{r.stderr}')
                failures += 1
            with open(path, 'w', encoding='utf-8') as f:
                f.write(original)
        # A directory the graph does not name fails too: new code must take a place in it.
        os.mkdir(os.path.join(copy, 'newlib'))
        r = subprocess.run([sys.executable, script, '--src', copy, '--layers', layers_path],
                           capture_output=True, text=True)
        if r.returncode == 1 and 'src/newlib/' in r.stdout:
            print('ok: a directory missing from layers.txt fails')
        else:
            print(f'FAIL: an unnamed directory was not caught (exit {r.returncode})')
            failures += 1
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--src', default=os.path.join(ROOT, 'src'))
    ap.add_argument('--layers', default=os.path.join(HERE, 'layers.txt'))
    ap.add_argument('--self-test', action='store_true')
    a = ap.parse_args()
    if a.self_test:
        return self_test(os.path.abspath(a.layers))
    edges, problems = check(a.src, read_layers(a.layers))
    for p in problems:
        print(p)
    if problems:
        print(f'{len(problems)} forbidden include(s); the graph is tests/layering/layers.txt')
        return 1
    print(f'layering: {edges} includes across directories, all allowed by tests/layering/layers.txt')
    return 0


if __name__ == '__main__':
    sys.exit(main())
