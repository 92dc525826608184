old() { cd /tmp/old && PYTHONPATH=/tmp/old /work/main/.venv/bin/python -m gdsbench sweep /tmp/ab/async-ab.yaml -o /tmp/ab/abba/old > /dev/null 2>&1; }
new() { cd /work/main && /work/main/.venv/bin/gdsbench sweep /tmp/ab/async-ab.yaml -o /tmp/ab/abba/new > /dev/null 2>&1; }
old; new; new; old; old; new; new; old
echo done > /tmp/ab/abba.done
