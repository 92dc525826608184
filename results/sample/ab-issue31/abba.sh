old() { cd /tmp/old && PYTHONPATH=/tmp/old:/tmp/old/lib/ckptio/src /work/main/.venv/bin/python -m gdsbench sweep /work/main/configs/local.yaml -o /tmp/ab/old > /tmp/ab/old.log 2>&1; }
new() { cd /work/main && /work/main/.venv/bin/gdsbench sweep /work/main/configs/local.yaml -o /tmp/ab/new > /tmp/ab/new.log 2>&1; }
old; new; new; old
echo done > /tmp/ab/abba.done
