#!/usr/bin/env bash
# The end of tools/test.sh's run: which outside clients the tests ran, and which tests were skipped and why, from
# the lines the tests appended to CUTR_CLIENT_LOG (cutr_tests::client_log: outcome, client, test, reason; tabs).
#   tools/client-summary.sh LOG
set -euo pipefail
log=$1
echo "== outside clients"
if [[ ! -s $log ]]; then
  echo "no test recorded an outside client (the tests did not get that far)"
  exit 0
fi
# Ran: one line per client with its number of tests. Skipped: one line per client and reason, with the tests.
awk -F'\t' '$1 == "ran" { k = $2; if (!((k, $3) in seen)) { seen[k, $3]; n[k]++ } }
  END { for (k in n) printf "ran      %s: %d test%s\n", k, n[k], n[k] == 1 ? "" : "s" }' "$log" | sort
awk -F'\t' '$1 == "skipped" {
    k = $2 "\t" $4; if (!((k, $3) in seen)) { seen[k, $3]; t[k] = t[k] (t[k] ? ", " : "") $3 } }
  END { for (k in t) { split(k, p, "\t"); printf "SKIPPED  %s (%s): %s\n", p[1], t[k], p[2] } }' "$log" | sort
