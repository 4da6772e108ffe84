#!/bin/sh
# Rebuild the followups4 sets' documents under DEST (default /work/heldout-docs) from the Debian
# registry alone (apt-get download + dpkg-deb -x; nothing is installed), and check the sha256 of the
# two .deb files and of the two documents. Idempotent: a document already in place with the right
# sha256 is left alone, and nothing is downloaded where both are.
#
#   sh bench/heldout/followups4/fetch_docs.sh [DEST]
#
# DEST/lua51-manual/manual.html   'Lua 5.1 Reference Manual' (Roberto Ierusalimschy, Luiz Henrique de Figueiredo,
#                                 Waldemar Celes; as shipped with Lua 5.1.5),
#                                 from Debian lua5.1-doc 5.1.5-9 (bookworm main),
#                                 /usr/share/doc/lua5.1-doc/doc/manual.html   (followup4-manual-lua.json)
# DEST/ledger/ledger3.html        'Ledger: Command-Line Accounting' (the Ledger 3 manual, as shipped with
#                                 Ledger 3.3.0), from Debian ledger 3.3.0-3 (bookworm main, amd64 .deb),
#                                 /usr/share/doc/ledger/ledger3.html   (followup4-manual-ledger.json)
set -eu
DEST=${1:-/work/heldout-docs}

. "$(dirname "$0")/../debian_fetch.sh"

place cce474a924a6ce3c6435ca08fdfe0991619fb765b478561fb4470f0dadca059a "$DEST/lua51-manual/manual.html" \
    lua5.1-doc all 5.1.5-9 \
    42b90b4bdf5551396b71e807cb6d9b88e7d30048573d0335edaa3f84826ee25e \
    usr/share/doc/lua5.1-doc/doc/manual.html

place 90cb36d3568f9b6e88e816417690c953f91585676018a13b20f225c0ded16b07 "$DEST/ledger/ledger3.html" \
    ledger amd64 3.3.0-3 \
    78e6e60c36ec5e9310bdfe566e1ceef4b7d05f04107474c9c90e1edf7293e880 \
    usr/share/doc/ledger/ledger3.html

echo "ok: $DEST/lua51-manual/manual.html $DEST/ledger/ledger3.html"
