#!/usr/bin/env bash
# Unpacks Debian packages with their dependency closure into a folder, installing nothing: the test clients'
# browser (chromium) and Java runtime come this way, without root, and the system's package set stays as it was.
#   tools/fetch-debs.sh DEST PACKAGE...      prints DEST/root, the unpacked tree (DEST/root/usr/lib/...)
# apt-get runs on private state under ${CUTR_CACHE:-<repo>/.cache}/apt (its own package lists, download cache and
# dpkg status), reading only /etc/apt's sources and /var/lib/dpkg/status. The closure is resolved by apt against a
# minimal Debian (the installed packages of priority required and what they depend on), not against this machine,
# so the same packages come whatever is installed here; each is fetched by `apt-get download` (checked against the
# archive's signed hashes) and unpacked with `dpkg -x`. libc6 is never unpacked: the system's loader goes with
# the system's libc. Idempotent: DEST/.complete holds the package list it was made for.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: tools/fetch-debs.sh DEST PACKAGE..." >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
dest=$1; shift
want="$*"
log() { printf '[fetch-debs] %s\n' "$*" >&2; }
if [[ -f "$dest/.complete" && "$(cat "$dest/.complete")" == "$want" ]]; then echo "$dest/root"; exit 0; fi
command -v apt-get >/dev/null && command -v dpkg >/dev/null \
  || { log "no apt-get/dpkg here (not Debian or Ubuntu): cannot fetch $want"; exit 1; }
apt=${CUTR_CACHE:-$repo/.cache}/apt
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial"
apt="$(cd "$apt" && pwd)"
# NoLocking: the private state needs no lock, and /var/lib/dpkg's lock is not ours to take; Sandbox::User=root
# keeps a root apt-get from handing downloads to the _apt user, who cannot write our folders.
opts=(-q -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o "Dir::State::status=$apt/status"
  -o Debug::NoLocking=1 -o APT::Sandbox::User=root)

# The minimal Debian that apt resolves against: the installed packages of priority required (or essential) and
# everything they depend on, as this machine's dpkg status lists them.
python3 - "$apt/status" <<'PY'
import re, sys
paras = [p for p in open("/var/lib/dpkg/status").read().split("\n\n") if "Status: install ok installed" in p]
def field(p, name):
    m = re.search(r"^" + name + r": (.*(?:\n .*)*)", p, re.M)
    return m.group(1).replace("\n", " ") if m else ""
by_name, providers = {}, {}
for p in paras:
    by_name.setdefault(field(p, "Package"), []).append(p)
    for v in filter(None, (x.strip().split(" ")[0].split(":")[0] for x in field(p, "Provides").split(","))):
        providers.setdefault(v, []).append(field(p, "Package"))
todo = [field(p, "Package") for p in paras if re.search(r"^(Priority: required|Essential: yes)$", p, re.M)]
base = set()
while todo:
    name = todo.pop()
    if name in base or name not in by_name:
        continue
    base.add(name)
    for p in by_name[name]:
        for dep in (field(p, "Depends") + "," + field(p, "Pre-Depends")).split(","):
            for alt in filter(None, (a.strip().split(" ")[0].split(":")[0] for a in dep.split("|"))):
                todo += [n for n in [alt] + providers.get(alt, []) if n in by_name]
open(sys.argv[1], "w").write("\n\n".join(p for p in paras if field(p, "Package") in base) + "\n")
PY

# Package lists at most a day old (a security update replaces the archive's chromium and drops the old one).
if [[ -z "$(find "$apt/lists" -maxdepth 1 -name '*_Packages*' -mmin -1440 2>/dev/null | head -1)" ]]; then
  log "apt-get update (private lists in $apt)"
  apt-get "${opts[@]}" update >&2
fi
uris=$(apt-get "${opts[@]}" install --print-uris -qq --no-install-recommends "$@") \
  || { log "apt-get cannot resolve $want"; exit 1; }
# Lines: 'URL' NAME_VERSION_ARCH.deb SIZE SHA256:...; `apt-get download` wants NAME=VERSION (epoch unescaped).
mapfile -t pkgs < <(awk '{print $2}' <<<"$uris" | sed -E 's/_([^_]*)_[^_]*\.deb$/=\1/; s/%3a/:/g')
if [[ " ${pkgs[*]} " == *" libc6="* ]]; then
  log "note: $want want a newer libc6 than this system's; the system's is used (the programs may not start)"
fi
mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | grep -v '^libc6=')
log "$want: ${#pkgs[@]} packages, $(awk '{s += $3} END {printf "%.0f", s / 1e6}' <<<"$uris") MB from Debian"
rm -rf "$dest" && mkdir -p "$dest/debs" "$dest/root"
(cd "$dest/debs" && apt-get "${opts[@]}" download "${pkgs[@]}" >&2)
for deb in "$dest"/debs/*.deb; do dpkg -x "$deb" "$dest/root"; done
# Absolute links (/etc/..., /usr/share/...) point into the system: point them into the tree where it has the target.
while IFS= read -r -d '' link; do
  target=$(readlink "$link")
  if [[ $target == /* && -e "$dest/root$target" ]]; then
    ln -sfn "$(realpath -s --relative-to="$(dirname "$link")" "$dest/root$target")" "$link"
  fi
done < <(find "$dest/root" -type l -print0)
printf '%s\n' "${pkgs[@]}" > "$dest/packages.txt"
# Documentation, manual pages and message translations: nothing a headless program reads (60 MB of chromium's).
rm -rf "$dest/debs" "$dest/root/usr/share/doc" "$dest/root/usr/share/man" "$dest/root/usr/share/locale"
printf '%s' "$want" > "$dest/.complete"
echo "$dest/root"
