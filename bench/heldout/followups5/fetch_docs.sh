#!/bin/sh
# Rebuild the followups5 sets' documents under DEST (default /work/heldout-docs) from the Debian
# registry alone (apt-get download + dpkg-deb -x; nothing is installed), and check the sha256 of the
# two .deb files and of the two documents. Idempotent: a document already in place with the right
# sha256 is left alone, and nothing is downloaded where both are.
#
#   sh bench/heldout/followups5/fetch_docs.sh [DEST]
#
# DEST/bash-man/bash.html         'BASH(1)', the Bash manual page (GNU Bash 5.2, updated 2022 September 19) as
#                                 HTML, from Debian bash-doc 5.2.15-2 (bookworm main),
#                                 /usr/share/doc/bash/bash.html   (followup5-manual-bash.json)
# DEST/libtool/libtool.html       'GNU Libtool' (the manual for GNU Libtool 2.4.7), from Debian libtool-doc
#                                 2.4.7-7~deb12u1 (bookworm main),
#                                 /usr/share/doc/libtool/libtool.html   (followup5-manual-libtool.json)
set -eu
DEST=${1:-/work/heldout-docs}

. "$(dirname "$0")/../debian_fetch.sh"

place 483fd1356f6b1656c53635cf9b43c96eb2b102be174406bc245884c6710264ec "$DEST/bash-man/bash.html" \
    bash-doc all 5.2.15-2 \
    2c1a353f7004d14ba81db19c253b958d2dd9582027650739c530fd50376a9d8b \
    usr/share/doc/bash/bash.html

place 2a139441697e6c63001a75aaa447f1b002bba1ca6605e1f64bd25825c8b96d1a "$DEST/libtool/libtool.html" \
    libtool-doc all 2.4.7-7~deb12u1 \
    1caf319d637d91150f4f74123433e028eaeabd5ac09002a4ffb8761c54f0b43d \
    usr/share/doc/libtool/libtool.html

echo "ok: $DEST/bash-man/bash.html $DEST/libtool/libtool.html"
