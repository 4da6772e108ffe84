#!/bin/sh
# Rebuild the whole-scope sets' documents (bench/heldout/whole/*.json) under DEST (default /work/heldout-docs)
# from the package registries alone: Debian's (apt-get download) and PyPI's (pip download). Nothing is installed.
#
#   sh bench/heldout/whole/fetch_docs.sh [DEST]
#
# DEST/brackenholme/the-daughters-of-brackenholme.txt  Pride and Prejudice ch. 1-23, people renamed
#                                          (r-cran-janeaustenr 1.0.0-1; janeausten_rdata.py + rename_pride.py)
# DEST/brackenholme/mapping.json           the renaming table
# DEST/janeausten/prideprejudice.txt       the original whole novel, as the package ships it (not a document)
# DEST/alice/alice.txt                     Alice's Adventures in Wonderland (wordcloud 1.9.6 sdist, examples/)
# DEST/tenacity-9.2.1/                     tenacity 9.2.1 sdist (documents: tenacity/ and README.rst)
# DEST/python_dotenv-1.2.4/                python-dotenv 1.2.4 sdist (documents: src/dotenv/ and README.md)
# DEST/bzip2-doc/usr/share/doc/bzip2/manual.html   only where /usr/share/doc/bzip2/manual.html (bzip2-doc
#                                          1.0.8-5, on the image by default) is missing or differs
# Every document's sha256 is checked at the end against the sets' records.
set -eu
DEST=${1:-/work/heldout-docs}
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$DEST/janeausten" "$DEST/brackenholme" "$DEST/alice"
PIP="python3 -m pip"

# 1. The renamed book: Jane Austen's novels as R data in a Debian package, read without R.
sh "$HERE/austen_novel.sh" prideprejudice "$DEST/janeausten/prideprejudice.txt"
python3 "$HERE/rename_pride.py" "$DEST/janeausten/prideprejudice.txt" \
    "$DEST/brackenholme/the-daughters-of-brackenholme.txt" --mapping "$DEST/brackenholme/mapping.json"

# 2. Alice's Adventures in Wonderland: the Project Gutenberg text wordcloud's sdist ships as an example.
#    (pip prepares the sdist's metadata, which fetches its build requirements as wheels; nothing is compiled.)
$PIP download --quiet --no-deps --no-binary wordcloud -d "$TMP" wordcloud==1.9.6
tar -xzf "$TMP/wordcloud-1.9.6.tar.gz" -C "$DEST/alice" --strip-components=2 wordcloud-1.9.6/examples/alice.txt

# 3. The two codebases, as their sdists unpack.
$PIP download --quiet --no-deps --no-binary tenacity -d "$TMP" tenacity==9.2.1
$PIP download --quiet --no-deps --no-binary python-dotenv -d "$TMP" python-dotenv==1.2.4
tar -xzf "$TMP/tenacity-9.2.1.tar.gz" -C "$DEST"
tar -xzf "$TMP/python_dotenv-1.2.4.tar.gz" -C "$DEST"

# 4. The manual: bzip2-doc's HTML manual, on the image by default; fetched only where it is not.
if ! echo "34f5eaeb37488b51662316b8d9f54228c96f72b54aec3bfc17cd731e3ce9bbd2  /usr/share/doc/bzip2/manual.html" \
        | sha256sum -c --quiet 2>/dev/null; then
    (cd "$TMP" && apt-get download bzip2-doc=1.0.8-5)
    dpkg-deb -x "$TMP"/bzip2-doc_1.0.8-5_all.deb "$DEST/bzip2-doc"
    echo "bzip2 manual: $DEST/bzip2-doc/usr/share/doc/bzip2/manual.html (use this path for the manual set)"
fi

cd "$DEST"
sha256sum -c --quiet <<'SUMS'
dfc684d4f857fa938268f9ab9c5567b64bd0691251eca959644adeabe6287a4d  janeausten/prideprejudice.txt
f00b287e63f5ae3442dc5b9c4bf18650adaf3b7f5034f7be5460089b934a0752  alice/alice.txt
d53d92339311c31770e817e8bc7185abd5bc63ca960a24d11e374a49e5507c1d  brackenholme/the-daughters-of-brackenholme.txt
6e163e88aeb0c0765a996208e9e482b820165d435d9f64d016610eb97494ed23  python_dotenv-1.2.4/src/dotenv/__init__.py
3744612c6ee71c8aad9491f0c1ea48a3ecdb24f371f6c7b0082446639dbc87fe  python_dotenv-1.2.4/src/dotenv/__main__.py
11f52f3c0cbbb3b7c59ab337281a120be9ccfb38f3546b41b16f49c290cf142c  python_dotenv-1.2.4/src/dotenv/cli.py
74740177d3dc7425298466faed7c32dc6914a8c49d7fd5d4522358c53677b585  python_dotenv-1.2.4/src/dotenv/ipython.py
697eb33eee75d78b73db61eaf96bf9a6547548c1811c93501b67e056e5470dea  python_dotenv-1.2.4/src/dotenv/main.py
0bc1350444eeff987f2c22924400ad0b7727563798118c641cd4c0de55bd30d0  python_dotenv-1.2.4/src/dotenv/parser.py
f0f8f2675695a10a5156fb7bd66bafbaae6a13e8d315990af862c792175e6e67  python_dotenv-1.2.4/src/dotenv/py.typed
083d2a5cebefa41deae51a4140c0fda97eaf1d7ed2c96f92ba2c063054a5b74f  python_dotenv-1.2.4/src/dotenv/variables.py
5c1287f04d4b983c6fd3a537f72a8c05b5d96a93844458080840d866cfe446ca  python_dotenv-1.2.4/src/dotenv/version.py
e24837acf59e35b4430f369354b56ff39837240529eed4bdccee97c50aee68d4  python_dotenv-1.2.4/README.md
9c050f8f59801a5bfb5a1738dd75d4ee544f368481e068268571c266e2b96577  tenacity-9.2.1/tenacity/__init__.py
6ecccb8012d314f5000d75a5a01a1e3257ab1a3d727a21b457e2c922fbe3e79e  tenacity-9.2.1/tenacity/_utils.py
77736d849eed3214e16a785532634d1f854367fcdd73c6f7d2803fb940312d1e  tenacity-9.2.1/tenacity/_version.py
7ba2aec841d36f880c998f6f2030695db2f4d9bd0ec858273a7b3443a3b429fa  tenacity-9.2.1/tenacity/after.py
40cfb868e1a035bb3c0d890502585b9f0265cf1c3d07dc62b9cd7007c2fc93cf  tenacity-9.2.1/tenacity/asyncio/__init__.py
af1d7dc2e951639ad9981ca724b9e484a800d7546d0777edfc2787be6e27310a  tenacity-9.2.1/tenacity/asyncio/retry.py
7db2c269be3697181f9ed6267a5b58052d58f615fd18a61e02972cbb3dbcc32e  tenacity-9.2.1/tenacity/before.py
4679592140a66a2692b2e070ac0e9076c6cc6093effe073bada55497ac1e2f5f  tenacity-9.2.1/tenacity/before_sleep.py
3cf785c410dd6d4cbf5de5be03e8e9b2a61ef4bb7709c230afe4eff95629be6c  tenacity-9.2.1/tenacity/nap.py
e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  tenacity-9.2.1/tenacity/py.typed
04b41b9a78df02c9143a0199ac5437656f680f42a644edde1b7bfad471925e77  tenacity-9.2.1/tenacity/retry.py
bd4b852e18e886fc271da51760c39fe49ff4174f916f07f3565c280f4f2d2c71  tenacity-9.2.1/tenacity/stop.py
84e90c180d40ed1e96b29c7607bef40b9f9e840f823c3e883a4d32c8efdfa91d  tenacity-9.2.1/tenacity/tornadoweb.py
fab8c53ae00dda64008a70c03654f22e059f3d697c3c8a6029513910fa7179fc  tenacity-9.2.1/tenacity/wait.py
86b17820856b09e98bd2a59be26dd93d916c624aef686fab457e46b3ff9194b6  tenacity-9.2.1/README.rst
SUMS
echo "documents ready under $DEST"
