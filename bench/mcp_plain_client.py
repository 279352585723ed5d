# Drives joch with one keep-alive HTTP client: no-op calls over REST (plain or in an execution) and MCP (stateless 2026-07-28, or a 2025-06-18 session); see bench/mcp_plain_client.sh and bench/RESULTS.md (issue 19 item 7).
import http.client, json, sys, time
host, port = sys.argv[1].split(':'); kind = sys.argv[2]; n = int(sys.argv[3])
c = http.client.HTTPConnection(host, int(port))
def post(path, body, headers):
    c.request('POST', path, json.dumps(body), headers)
    r = c.getresponse(); data = r.read(); return r.status, data
NS = 'bench'
if kind == 'setup':
    tool = {"apiVersion": "joch.dev/v1alpha1", "kind": "Tool", "metadata": {"name": "noop"},
            "spec": {"description": "noop", "inputSchema": {"type": "object"}, "sideEffects": {"level": "read_only"}, "backend": {"type": "noop"}}}
    print(post(f'/v1/namespaces/{NS}/tools', tool, {'content-type': 'application/json'})[0]); sys.exit()
sid = None
if kind == 'session':
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}}
    c.request('POST', f'/v1/namespaces/{NS}/mcp', json.dumps(init), {'content-type': 'application/json', 'accept': 'application/json, text/event-stream'})
    r = c.getresponse(); r.read(); sid = r.getheader('mcp-session-id')
    post(f'/v1/namespaces/{NS}/mcp', {"jsonrpc": "2.0", "method": "notifications/initialized"}, {'content-type': 'application/json', 'accept': 'application/json, text/event-stream', 'mcp-session-id': sid})
t = time.time()
for i in range(n):
    if kind in ('rest', 'rest_exec'):
        spec = {"toolRef": {"name": "noop"}, "input": {"n": i}}
        if kind == 'rest_exec':
            spec["executionRef"] = {"name": "probe-run"}
        s, d = post(f'/v1/namespaces/{NS}/toolcalls', {"spec": spec}, {'content-type': 'application/json'})
    elif kind == 'session':
        body = {"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": {"name": "noop", "arguments": {"n": i}, "_meta": {"progressToken": i}}}
        s, d = post(f'/v1/namespaces/{NS}/mcp', body, {'content-type': 'application/json', 'accept': 'application/json, text/event-stream', 'mcp-session-id': sid, 'mcp-protocol-version': '2025-06-18'})
    else:
        meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientInfo": {"name": "probe", "version": "1"}, "io.modelcontextprotocol/clientCapabilities": {}, "progressToken": i}
        body = {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "noop", "arguments": {"n": i}, "_meta": meta}}
        s, d = post(f'/v1/namespaces/{NS}/mcp', body, {'content-type': 'application/json', 'accept': 'application/json, text/event-stream', 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'noop'})
    assert s in (200, 201), (s, d)
print(kind, n, 'calls', round((time.time() - t) / n * 1000, 3), 'ms/call', d[:120])
