#!/bin/sh
# Rebuilds the documents of the named, named2 and named3 sets (bench/heldout/named*/) under DEST (default
# /work/heldout-docs/named): Python packages from their PyPI sdists (pip download, sha256 checked), GNU manuals
# from the Info files of Debian 12's packages (apt-get download, sha256 checked, flattened to text with the
# node-marker byte 0x1f removed). Nothing is installed. Every document's sha256 is checked at the end.
set -eu
DEST=${1:-/work/heldout-docs/named}
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../debian_fetch.sh"
mkdir -p "$DEST/sdist"
sdist() {  # sdist NAME VERSION FILE SHA256
    [ -f "$DEST/sdist/$3" ] || python3 -m pip download --quiet --no-deps --no-binary :all: -d "$DEST/sdist" "$1==$2"
    echo "$4  $DEST/sdist/$3" | sha256sum -c --quiet -
    tar -xzf "$DEST/sdist/$3" -C "$TMP"
}
info() {  # info PACKAGE VERSION DEB_SHA256 INFO_NAME TARGET
    place_any "$1" "$2" "$3" "usr/share/info/$4.info.gz" "$TMP/$4.info.gz"
    mkdir -p "$(dirname "$5")"
    gzip -dc "$TMP/$4.info.gz" | tr -d '\037' > "$5"
}
place_any() {  # fetch a file out of a .deb into TMP, whatever its sha256 (the document's is checked below)
    (cd "$TMP" && apt-get download "$1=$2" >/dev/null 2>&1)
    deb="$TMP/$(echo "$1_$2" | sed 's/:/%3a/')_amd64.deb"
    echo "$3  $deb" | sha256sum -c --quiet -
    dpkg-deb -x "$deb" "$TMP/$1"
    cp "$TMP/$1/$4" "$5"
}
package() {  # package FOLDER_IN_SDIST README TARGET PACKAGE_DIR
    rm -rf "$3" && mkdir -p "$3"
    cp "$1/$2" "$3/"
    cp -r "$1/$4" "$3/$(basename "$4")"
    find "$3" -name __pycache__ -prune -exec rm -rf {} + ; find "$3" -name "*.typed" -delete
    rm -rf "$3/$(basename "$4")/tests"
}
sdist h11 0.16.0 h11-0.16.0.tar.gz 4e35b956cf45792e4caa5885e69fba00bdbc6ffafbfa020300e549b208ee5ff1
package "$TMP/h11-0.16.0" README.rst "$DEST/docs/h11" h11
sdist shellingham 1.5.4 shellingham-1.5.4.tar.gz 8dbca0739d487e5bd35ab3ca4b36e11c4078f3a234bfce294b0a0291363404de
package "$TMP/shellingham-1.5.4" README.rst "$DEST/docs/shellingham" src/shellingham
sdist sse-starlette 3.7.0 sse_starlette-3.7.0.tar.gz 326416da2ab52e9a41b3f409d3ff897eda45aa68c9f3b7b17d0913aab8d219c3
package "$TMP/sse_starlette-3.7.0" README.md "$DEST/docs/sse-starlette" sse_starlette
sdist iniconfig 2.3.1 iniconfig-2.3.1.tar.gz 67f4b9c50da0dedf52af349e7749a80a9057a5031199791b906c3bb3ae878960
package "$TMP/iniconfig-2.3.1" README.rst "$DEST/docs2/iniconfig" src/iniconfig
sdist mdurl 0.1.2 mdurl-0.1.2.tar.gz bb413d29f5eea38f31dd4754dd7377d4465116fb207585f97bf925588687c1ba
package "$TMP/mdurl-0.1.2" README.md "$DEST/docs2/mdurl" src/mdurl
sdist annotated-types 0.8.0 annotated_types-0.8.0.tar.gz 13b2beaad985e05e2d6407ee4c4f35590b11f8d693a258a561055cac8f64cab7
package "$TMP/annotated_types-0.8.0" README.md "$DEST/docs2/annotated-types" annotated_types
sdist cycler 0.12.1 cycler-0.12.1.tar.gz 88bb128f02ba341da8ef447245a9e138fae777f6a23943da4540077d3601eb1c
package "$TMP/cycler-0.12.1" README.rst "$DEST/docs3/cycler" cycler
sdist typing-inspection 0.4.5 typing_inspection-0.4.5.tar.gz 7f16c411e7930dc79596d42ab44672a3fe5f60eb34b781a1647e7872363120c7
package "$TMP/typing_inspection-0.4.5" README.md "$DEST/docs3/typing-inspection" src/typing_inspection
info gzip 1.12-1 eabec1dde2834f72540d7b93fc5df2625f52611c06d93d61f5cdb12480e0e6a3 gzip "$DEST/docs/gzip/gzip.txt"
info bc 1.07.1-3+b1 baaa4e935c5e3bcd57d4f2f4e7a1ddc67bd4eb8629d98f97a696548849ae01ac bc "$DEST/docs/bc/bc.txt"
info time 1.9-0.2 10257c6fe888e6578550b1f20705d282dd630b76f8df0c006aec3031fefe5e23 time "$DEST/docs2/time/time.txt"
info ed 1.19-1 eb009104f25267f6bddbf936afbfa2cb23b6c1685b2d4c60027c4513feb17745 ed "$DEST/docs2/ed/ed.txt"
info libffi-dev 3.4.4-1 89fb890aee5148f4d308a46cd8980a54fd44135f068f05b38a6ad06800bf6df3 libffi "$DEST/docs3/libffi/libffi.txt"
info gettext 0.21-12 8c1f9d43575373ce311f51d00a13afbb4888d63aa559a93a3472f5d77513b60c autosprintf "$DEST/docs3/autosprintf/autosprintf.txt"
cd "$DEST"
sha256sum -c --quiet <<'SUMS'
601d3807060cddcb156c5176e61f55a1830aa0198ea9dc90b2e427e35bd06199  docs/bc/bc.txt
e0a1e59f0a892e356e52814d85d60f2a1c7919240cbc3c12e8c40ee1a38afa7a  docs/gzip/gzip.txt
66a4f46f080120491ec68ae1227ef3cc4e1733f83ff316b03382d2a431adc3f3  docs/h11/README.rst
88ed4ace448ee36c99e9f7e0f953206f1fd9553586518d349d16045a7facde46  docs/h11/h11/__init__.py
c9b8b1af4c6cba99e403a18503232e6ee5c5e9373595bfe117cf743600ac7cd7  docs/h11/h11/_abnf.py
93d61155fea4a19a9bb6d056dfac5259a26959d6706bec50554f401c4a3d0ee2  docs/h11/h11/_connection.py
23deda5e86a5d56bbb7642f9e3c04034150290e21b7bec790a2a1803d201635e  docs/h11/h11/_events.py
3fb0fe9413711f074b64f2e29a6630acf1bef59923125bef25925d6408123fee  docs/h11/h11/_headers.py
6b8472a4e454082dddd2afe4c4fb8120cee34c3f222ede57f754c7d05b1db8de  docs/h11/h11/_readers.py
c6bb29b1db0d81617145f41c4d7c51f11add8d15d74cad08a39710616a49d56b  docs/h11/h11/_receivebuffer.py
ff92c6fc1191f0509c1507813c7f93307826ffe07e1147160a74287fff578c51  docs/h11/h11/_state.py
2d69248d7c89685940cba2eddfdc3bdd44ad925153e68bdcbe8d13918ed162e9  docs/h11/h11/_util.py
1954ac6cf48f0dc3ae17aa6d7c88979d52686849b7ca05db327aa5aff1a26a1c  docs/h11/h11/_version.py
a052a6e8fb637877db8f844b5fb541eca0dcd60218e778171b7fc747d96d9930  docs/h11/h11/_writers.py
44f77e4381cb700a17a74fa2e8b53030781aa1eaa974afea16fd36c0b968a156  docs/shellingham/README.rst
a4029750f294770c84ac2d198d2fb9c3e7d17526e675c7ef9e9b7fc75c96aad0  docs/shellingham/shellingham/__init__.py
bfe093affec5edc240b4d9f3a5ad4dfc797c69f918e728830388e81a6b1406ed  docs/shellingham/shellingham/_core.py
9ba27a4aec32a95565c574fd05cfbd17fd71f93e6ed2008516b4401762c891e8  docs/shellingham/shellingham/nt.py
a41ebdaadbd927fc887f8f27978f997d2df02f0c2e5ee9275ce6610670b64f5a  docs/shellingham/shellingham/posix/__init__.py
fefd7c51a5dbcebe26b8d86bdfe987d4575276367f74e5d0aed532a2621b2984  docs/shellingham/shellingham/posix/_core.py
9d253122e412a2dbda0d6efa8b4a1340033d699f4f5c12c500492d5a58d2282a  docs/shellingham/shellingham/posix/proc.py
346983282ba484da7495a87060268c5e984161a55b85b891f41b44d0e913f2a5  docs/shellingham/shellingham/posix/ps.py
5ac604f54d07dba7c4df2ba1870ce6e686524b5fd7de5c73de6d0c91fce0a7a7  docs/sse-starlette/README.md
7cce2404aa84d559333fe38f6780ded1f9c9347307f20e4581e9ae00c6f3e879  docs/sse-starlette/sse_starlette/__init__.py
82a290c4cb34c47c61736d5f5afff82cc6a9030bcf012dc2d4e80aff32997a70  docs/sse-starlette/sse_starlette/_utils.py
cca49c6d608e00c8e26d2363a782f3004714cefa5cccd34644f60e92899f9afd  docs/sse-starlette/sse_starlette/event.py
32319b50044e1501bad2c81efba5017c24a1a04498cafe64114c71a974a10744  docs/sse-starlette/sse_starlette/sse.py
2f5c68d2c1c267ffb3d4fe474072ecb3ef29be7dc1e9ba3ab852cf7fae4db6c8  docs2/annotated-types/README.md
a7104a4d439b27a9f74fc0be236b9ba1b7831e6044026802a205abc1298a9bc8  docs2/annotated-types/annotated_types/__init__.py
d867472acb57b81ce97f78972828e6bc5669ca4db33fd1e6f645c6183846068e  docs2/annotated-types/annotated_types/test_cases.py
2641f4b96bb3508b8e53cb4ffc4554004f8b4b796476dcad1181a9b4595a44eb  docs2/ed/ed.txt
995404dccb903e74e6a25530d784268257e28bf7899a219176d0f06d8d1cd7db  docs2/iniconfig/README.rst
bb1c9017eea0053a104bd0703f3d8d13e7b9a854e4a364ee765ad64da7220819  docs2/iniconfig/iniconfig/__init__.py
15824a78105b52aa9ed414ce6ad073967c73be7ea5ae9d991a0df97a6e0cc2e1  docs2/iniconfig/iniconfig/_parse.py
eb171e49e0db04bf3cc5f5aafecc7199313b60994d306b4edf4b19f66b57e253  docs2/iniconfig/iniconfig/_version.py
9a2a50fda3310fd0af4af156375a135d8e10b919ca00c6757f7b027668c34d4d  docs2/iniconfig/iniconfig/exceptions.py
2d2e2af828e9fdcc5531ecfff604fc1fac0e8580dae501ce88cdb47b23283bde  docs2/mdurl/README.md
d6fa44f3d3725e7888459342ff87fa04f9b751be1b3e7b637f2ca12d147ba295  docs2/mdurl/mdurl/__init__.py
dd0fe00d0a94fff4ef0dbbbbc7e6fd2e36d5978416cb983fa85c258dcbaf37f6  docs2/mdurl/mdurl/_decode.py
82824b505b75878ad564daaa9bdb75e4dc365be6c55d8404cb7691d352265afb  docs2/mdurl/mdurl/_encode.py
c5972dd2675e3d70341f7900ab18c6b650793bce86df90c060c1a4038e02981e  docs2/mdurl/mdurl/_format.py
7b365290cdbfe0d436671d38eec11d7091bb3584111478992bb63c20d1c5cf06  docs2/mdurl/mdurl/_parse.py
e6442745037603f1b8b2f2e747365c1b46dfa03f406c1ad80d7a2eb031d9df3d  docs2/mdurl/mdurl/_url.py
2be1867c7297a4c51163242121f93b62fe2a96b3615b3ff9dc5b75954ce64ced  docs2/time/time.txt
be2aff86095f3d54259d5599958ae0b3f847aa407e00dafc5b0d263b2c268b65  docs3/autosprintf/autosprintf.txt
7664a0f6e0adb250944bcbabb55b5d2c533bc8bc857963958e510dda007f8ea7  docs3/cycler/README.rst
d4975182fe59cf1a3e5b57afec1fcb5aabb2b163fa2d91fa08793f08eb486971  docs3/cycler/cycler/__init__.py
7d7a0c47e05e1c1af8b1c9311078f21149dfbdbec8a1c0eddd9268e65632dc0f  docs3/libffi/libffi.txt
37b6123e02819a13623e1b63470ea9e81fdb71c9ebb285a48fb916a327898f7c  docs3/typing-inspection/README.md
e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  docs3/typing-inspection/typing_inspection/__init__.py
fe3f08f07f035fd4e07e9b83bb62239d4ad1081b782b4e9144884a6720f9d26a  docs3/typing-inspection/typing_inspection/introspection.py
a778d6290d51581c9c9a23e0263af2a4604c76def5c4d40a7cd1a375b0046ff6  docs3/typing-inspection/typing_inspection/typing_objects.py
3bd24dd92d0270d31d64fd40abc1ef8693f5322aab9a78aeb3c5b62f992f84be  docs3/typing-inspection/typing_inspection/typing_objects.pyi
SUMS
echo "documents in $DEST: docs/ (named), docs2/ (named2), docs3/ (named3)"
