#!/bin/sh
# bench/mcp_plain_client.sh JOCH_BIN: REST, stateless MCP and session MCP no-op calls from one keep-alive client.
bin=$1; dir=$(mktemp -d); JOCH_LOG=warn $bin serve --addr 127.0.0.1:0 --db $dir/joch.db > $dir/out 2>/dev/null & jp=$!
sleep 1.5; addr=$(grep -o "http://[0-9.:]*" $dir/out | head -1 | sed 's#http://##')
python3 "$(dirname "$0")/mcp_plain_client.py" $addr setup 0 > /dev/null
for k in rest mcp session; do python3 "$(dirname "$0")/mcp_plain_client.py" $addr $k 300 > /dev/null; done
for k in rest mcp rest_exec session rest mcp rest_exec session; do
  a=$(awk '{print $14+$15}' /proc/$jp/stat); s0=$(cat /proc/$jp/task/*/status | awk '/ctxt_switches/{s+=$2} END{print s}')
  out=$(python3 "$(dirname "$0")/mcp_plain_client.py" $addr $k 3000)
  s1=$(cat /proc/$jp/task/*/status | awk '/ctxt_switches/{s+=$2} END{print s}'); b=$(awk '{print $14+$15}' /proc/$jp/stat)
  echo "$k $(echo $out | awk '{print $4}') ms/call, switches/call $(echo "scale=1; ($s1-$s0)/3000" | bc), cpu ms/call $(echo "scale=3; ($b-$a)*10/3000" | bc)"
done
kill $jp
