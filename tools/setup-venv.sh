#!/usr/bin/env sh
# Creates the virtual environment (when missing) and installs posenc into it
# with the pinned versions of constraints.txt. A torch that is already there,
# in the venv or in the interpreter the venv is made from, is kept: the torch
# pin (and the triton pin) is dropped so pip never replaces them.
# usage: tools/setup-venv.sh PYTHON VENV EXTRAS
set -eu
python=$1
venv=$2
extras=$3

if [ ! -x "$venv/bin/python" ]; then
    if "$python" -c "import torch" 2>/dev/null; then
        echo "posenc: $python already has torch; the venv will use it"
        "$python" -m venv --system-site-packages "$venv"
    else
        "$python" -m venv "$venv"
    fi
fi

constraints=constraints.txt
if "$venv/bin/python" -c "import torch" 2>/dev/null; then
    # that torch's own triton (CUDA builds ship one) is kept too
    grep -v -e '^torch==' -e '^triton==' constraints.txt > "$venv/constraints-keep-torch.txt"
    constraints="$venv/constraints-keep-torch.txt"
fi
"$venv/bin/python" -m pip install --quiet --constraint "$constraints" --editable ".[$extras]"
"$venv/bin/python" -c "import torch, posenc; print(f'posenc {posenc.__version__} with torch {torch.__version__}')"
