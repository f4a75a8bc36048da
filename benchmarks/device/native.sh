#!/bin/bash
# The native H200 measurements of issues 36 and 38 in one device call (../.library/device):
#   run(command="bash benchmarks/device/native.sh", carry=[".whls", ".gl"])
# .whls: the wgpu, cffi, pycparser, rendercanvas and pytest wheels for Python 3.12 (pip download);
# .gl: the Vulkan loader packages (the device README says how to fetch them). Writes $OUT/*.log.
export PYTHONUNBUFFERED=1
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whls/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
ldconfig -p | grep -q libvulkan || echo "no libvulkan"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import wgpu; a=wgpu.gpu.request_adapter_sync(power_preference='high-performance'); print(a.info)" 2>&1 | tail -1
echo "=== compile_phases --depth"
timeout 150 python3 tools/compile_phases.py --depth --repeat 3 2>&1 | grep -v -i "xdg_runtime\|no config\|windowing" | tee $OUT/compile_phases.log | tail -32
echo "=== scale 10.7M native + torch"
timeout 200 python3 benchmarks/scale.py --only 10.7M --steps 30 --engine native --engine torch --engine PyTorch --json $OUT/scale10.json 2>&1 | grep -v -i "xdg_runtime\|no config\|windowing" | tee $OUT/scale10.log | tail -20
echo "=== scale 124M native + torch"
timeout 220 python3 benchmarks/scale.py --only 124M --steps 20 --engine native --engine torch --engine PyTorch --json $OUT/scale124.json 2>&1 | grep -v -i "xdg_runtime\|no config\|windowing" | tee $OUT/scale124.log | tail -20
