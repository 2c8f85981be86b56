#!/usr/bin/env sh
# Creates the environment of the timm parity tests (when missing) and installs posenc into it.
# timm imports torchvision, and the registry's torchvision does not import beside the pinned CPU
# torch 2.13.0, so this environment takes torch and torchvision releases that match each other
# (constraints-timm.txt). Exit status 3: the environment could not be built (a registry or disk
# without those releases); any other failure is the tests'.
# usage: tools/setup-timm-venv.sh PYTHON VENV
set -u
python=$1
venv=$2
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv" || exit 3
fi
"$venv/bin/python" -m pip install --quiet --constraint constraints-timm.txt \
    torch torchvision timm pytest hypothesis --editable . || exit 3
"$venv/bin/python" -c "import timm, torch, posenc; print(f'timm {timm.__version__} with torch {torch.__version__}')" || exit 3
