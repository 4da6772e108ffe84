#!/bin/sh
# Rebuild the whole3 set's document (bench/heldout/whole3/*.json) under DEST (default /work/heldout-docs)
# from Debian's package registry alone (apt-get download). Nothing is installed.
# Idempotent: every run writes the same bytes to the same paths and checks them.
#
#   sh bench/heldout/whole3/fetch_docs.sh [DEST]
#
# DEST/whole3/a-season-at-bath.txt     Northanger Abbey ch. 1-8, people renamed
#                                      (r-cran-janeaustenr 1.0.0-1; ../whole/janeausten_rdata.py + rename_northanger.py)
# DEST/whole3/mapping.json             the renaming table
# DEST/janeausten/northangerabbey.txt  the original whole novel, as the package ships it (not a document)
# The input (the .deb) and every output are checked against sha256 sums.
set -eu
DEST=${1:-/work/heldout-docs}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$DEST/janeausten" "$DEST/whole3"

# Jane Austen's novels as R data in a Debian package, read without R.
sh "$HERE/../whole/austen_novel.sh" northangerabbey "$DEST/janeausten/northangerabbey.txt"
python3 "$HERE/rename_northanger.py" "$DEST/janeausten/northangerabbey.txt" \
    "$DEST/whole3/a-season-at-bath.txt" --mapping "$DEST/whole3/mapping.json"

cd "$DEST"
sha256sum -c --quiet <<'SUMS'
51f91bbe0517db8e65cff009b097ce0a1836124c4e0532ac19e6c0cad982abed  janeausten/northangerabbey.txt
8a3eb0f506080a33dfb7b9ecf5a4e17b21f582f16b4b71e8064db6a74dcefc58  whole3/a-season-at-bath.txt
caab3fccb4de051691f47def6aebec6600ddbc7e157c2bf1647d01b536e2daf1  whole3/mapping.json
SUMS
echo "documents ready under $DEST/whole3"
