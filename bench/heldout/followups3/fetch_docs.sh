#!/bin/sh
# Rebuild the followups3 sets' documents under DEST (default /work/heldout-docs) from the Debian
# registry alone (apt-get download + dpkg-deb -x; nothing is installed), and check the sha256 of the
# two .deb files and of the two documents. Idempotent: a document already in place with the right
# sha256 is left alone, and nothing is downloaded where both are.
#
#   sh bench/heldout/followups3/fetch_docs.sh [DEST]
#
# DEST/nettle/nettle.html                 'Nettle: a low-level cryptographic library' (the manual's text says
#                                         'version 3.4', updated 2017; as shipped with Nettle 3.8.1),
#                                         from Debian nettle-dev 3.8.1-2 (bookworm main, amd64 .deb),
#                                         /usr/share/doc/nettle-dev/nettle.html   (followup3-manual-nettle.json)
# DEST/git-user-manual/user-manual.html   'Git User Manual' (as shipped with Git 2.39.5),
#                                         from Debian git-doc 1:2.39.5-0+deb12u3 (bookworm main),
#                                         /usr/share/doc/git-doc/user-manual.html   (followup3-manual-git-user-manual.json)
set -eu
DEST=${1:-/work/heldout-docs}

. "$(dirname "$0")/../debian_fetch.sh"

place 1942e00ca583738d96803eb9ed7ddcca941e44aba83f21b405638aa2b25b0930 "$DEST/nettle/nettle.html" \
    nettle-dev amd64 3.8.1-2 \
    aa8e4331a974f00db23a14389c67dfe66bc359b09b6c2dbfe555230942feb6be \
    usr/share/doc/nettle-dev/nettle.html

place 6a214e62aade7d62c1c6abce4ea6332239b5e946a0a2b30147515aa345eb473c "$DEST/git-user-manual/user-manual.html" \
    git-doc all 1:2.39.5-0+deb12u3 \
    3c89668a11053a6bafade3de1f611f4613db31e082af63f43d8c5b69ad8795ec \
    usr/share/doc/git-doc/user-manual.html

echo "ok: $DEST/nettle/nettle.html $DEST/git-user-manual/user-manual.html"
