# Shared by the fetch_docs.sh scripts that take documents out of Debian packages (sourced, not run, after
# `set -eu`): `place`, built on `have` and `fetch`, with a scratch folder removed on exit.

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

have() {  # have SHA256 FILE: true when FILE exists with that sha256
    [ -f "$2" ] && echo "$1  $2" | sha256sum -c --quiet - >/dev/null 2>&1
}

# fetch PACKAGE ARCH VERSION DEB_SHA256 PATH_IN_DEB TARGET: apt-get download (nothing is installed), check the
# .deb's sha256, dpkg-deb -x, and copy one file out of it into place
fetch() {
    if [ "$2" = all ]; then spec="$1=$3"; else spec="$1:$2=$3"; fi
    (cd "$TMP" && apt-get download "$spec")
    deb="$TMP/$1_$(echo "$3" | sed 's/:/%3a/')_$2.deb"
    echo "$4  $deb" | sha256sum -c --quiet -
    dpkg-deb -x "$deb" "$TMP/$1"
    cp "$TMP/$1/$5" "$6.tmp"
    mv "$6.tmp" "$6"
}

# place SHA256 TARGET PACKAGE ARCH VERSION DEB_SHA256 PATH_IN_DEB: TARGET with that sha256, taken out of the
# package unless it is in place already (idempotent), and checked either way
place() {
    mkdir -p "$(dirname "$2")"
    have "$1" "$2" || fetch "$3" "$4" "$5" "$6" "$7" "$2"
    echo "$1  $2" | sha256sum -c --quiet -
}
