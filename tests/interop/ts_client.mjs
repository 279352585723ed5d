// The official TypeScript SDK client (npm @modelcontextprotocol/sdk) in
// front of an MCP endpoint: runs the steps named on the command line and
// prints one JSON object with what each answered (or the error it threw),
// for test_ts_client.py to judge.
//
//   node ts_client.mjs <url> <step>...   steps: tools, call:<name>:<json args>,
//   resources, read:<uri>, templates, prompts, prompt:<name>:<json args>
// A <url> `stdio:<command> <args...>` starts that command and speaks over
// its stdin/stdout instead (`joch mcp`). With TS_CLIENT_SAMPLES set, the
// client declares sampling and answers every sampling request itself.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { CreateMessageRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const [url, ...steps] = process.argv.slice(2);
const samples = Boolean(process.env.TS_CLIENT_SAMPLES);
const client = new Client(
  { name: 'joch-interop-ts', version: '1.0.0' },
  { capabilities: samples ? { sampling: {} } : {} }
);
if (samples) {
  client.setRequestHandler(CreateMessageRequestSchema, async () => ({
    role: 'assistant',
    content: { type: 'text', text: 'sampled by the TypeScript client' },
    model: 'interop-test'
  }));
}
const transport = url.startsWith('stdio:')
  ? (([command, ...args]) => new StdioClientTransport({ command, args }))(url.slice(6).split(' '))
  : new StreamableHTTPClientTransport(new URL(url));
await client.connect(transport);

// `kind:name:json`, where name may itself hold colons (a URI).
function parse(step) {
  const kind = step.slice(0, step.indexOf(':'));
  const rest = step.slice(kind.length + 1);
  const at = rest.lastIndexOf(':{');
  return at < 0 ? [kind, rest, {}] : [kind, rest.slice(0, at), JSON.parse(rest.slice(at + 1))];
}

const report = {};
for (const step of steps) {
  try {
    if (step === 'tools') report[step] = await client.listTools();
    else if (step === 'resources') report[step] = await client.listResources();
    else if (step === 'templates') report[step] = await client.listResourceTemplates();
    else if (step === 'prompts') report[step] = await client.listPrompts();
    else {
      const [kind, name, args] = parse(step);
      if (kind === 'call') report[step] = await client.callTool({ name, arguments: args });
      else if (kind === 'read') report[step] = await client.readResource({ uri: name });
      else if (kind === 'prompt') report[step] = await client.getPrompt({ name, arguments: args });
      else throw new Error(`unknown step ${step}`);
    }
  } catch (e) {
    report[step] = { thrown: String(e?.message ?? e) };
  }
}
console.log(JSON.stringify(report));
await client.close();
