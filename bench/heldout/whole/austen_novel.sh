#!/bin/sh
# One of Jane Austen's novels as plain text, from the R data of Debian's r-cran-janeaustenr 1.0.0-1 (read without
# R by janeausten_rdata.py beside this script); the .deb is checked against its sha256. The renamed books of the
# whole-scope sets start from it (whole/, whole2/, whole3/ fetch_docs.sh).
#
#   sh bench/heldout/whole/austen_novel.sh NAME OUT     (NAME: prideprejudice, persuasion, northangerabbey, ...)
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
(cd "$TMP" && apt-get download r-cran-janeaustenr=1.0.0-1)
(cd "$TMP" && echo "df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95  r-cran-janeaustenr_1.0.0-1_all.deb" \
    | sha256sum -c --quiet)
dpkg-deb -x "$TMP"/r-cran-janeaustenr_1.0.0-1_all.deb "$TMP/janeaustenr"
python3 "$HERE/janeausten_rdata.py" "$TMP/janeaustenr/usr/lib/R/site-library/janeaustenr/data" "$1" > "$2"
