// The official TypeScript MCP client (`@modelcontextprotocol/sdk`, installed into `mcp/node_modules`
// by `npm ci --prefix mcp`) driving a graph served with `agentflow::mcp::serve_stdio` (the
// `mcp_served` example).
//
//   node tests/mcp/ts_client.mjs start  <program> [args..]
//   node tests/mcp/ts_client.mjs resume <thread> <program> [args..]
//
// `start` lists the tool (name and input schema), calls it with a claim that runs to its end and
// with one whose refund waits for a person's approval, and checks that an attempt to decide the
// approval through the tool is refused. `resume` continues a thread whose approval was decided
// meanwhile and checks it finished. Each prints one JSON summary line on stdout and exits 1 with
// the reason on stderr at the first mismatch.

import { Client } from '../../mcp/node_modules/@modelcontextprotocol/sdk/dist/esm/client/index.js';
import { StdioClientTransport } from '../../mcp/node_modules/@modelcontextprotocol/sdk/dist/esm/client/stdio.js';

const TOOL = 'refund_claim';
const MASK = '•••';

function fail(why, detail) {
    process.stderr.write(`ts_client: ${why}${detail === undefined ? '' : `: ${JSON.stringify(detail)}`}\n`);
    process.exit(1);
}

function expect(condition, why, detail) {
    if (!condition) fail(why, detail);
}

async function connect(program, args) {
    const transport = new StdioClientTransport({ command: program, args, stderr: 'inherit' });
    const client = new Client({ name: 'agentflow-ts-client-test', version: '1.0.0' });
    await client.connect(transport);
    return client;
}

async function call(client, args) {
    return client.callTool({ name: TOOL, arguments: args });
}

function text(result) {
    return (result.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

async function start(client) {
    const { tools } = await client.listTools();
    expect(tools.length === 1 && tools[0].name === TOOL, 'the server lists one tool, refund_claim', tools);
    const schema = tools[0].inputSchema;
    expect(schema.type === 'object', 'the input schema is an object', schema);
    expect(JSON.stringify(schema.required) === '["thread"]', 'the input schema requires `thread`', schema);
    expect(schema.properties.thread?.type === 'string', '`thread` is a string', schema);
    expect('resume' in schema.properties, 'the input schema has `resume`', schema);
    expect(schema.properties.input?.properties?.amount?.type === 'integer', '`input.amount` is an integer', schema);

    const small = await call(client, { thread: 'claim-small', input: { customer: 'Ada Lovelace', amount: 20 } });
    const done = small.structuredContent;
    expect(!small.isError, 'a small claim is not an error', small);
    expect(done?.status === 'done' && done.thread === 'claim-small', 'a small claim runs to its end', small);
    expect(done.state.amount === 20 && done.state.outcome?.credited === 20, 'the final state is returned', done);
    expect(done.state.customer === MASK, 'the personal field is masked for the MCP actor', done);

    const big = await call(client, { thread: 'claim-big', input: { customer: 'Ada Lovelace', amount: 90 } });
    const waiting = big.structuredContent;
    expect(!big.isError, 'a claim waiting for approval is not an error', big);
    expect(waiting?.status === 'waiting' && waiting.thread === 'claim-big', 'a large claim waits', big);
    const approval = (waiting.waiting_for ?? []).find((w) => w.kind === 'approval');
    expect(approval && typeof approval.id === 'string' && approval.tool === 'refund', 'it waits for the refund approval', waiting);

    const decided = await call(client, { thread: 'claim-big', resume: { [approval.id]: 'approve' } });
    expect(decided.isError === true, 'deciding the approval through the tool is refused', decided);
    expect(text(decided).includes('approval desk'), 'the refusal says where approvals are decided', text(decided));

    const early = await call(client, { thread: 'claim-big', resume: {} });
    expect(!early.isError && early.structuredContent?.status === 'waiting', 'before the decision it still waits', early);

    const stranger = await call(client, { thread: 'no-such-thread', resume: {} });
    expect(stranger.isError === true, 'resuming an unknown thread is an error', stranger);

    return { tool: tools[0].name, done, waiting, refused: text(decided), unknown: text(stranger) };
}

async function resume(client, thread) {
    const result = await call(client, { thread, resume: {} });
    const done = result.structuredContent;
    expect(!result.isError && done?.status === 'done', 'the approved claim finishes', result);
    // The node keeps the tool's observation: `{ok, result}`, the result as the tool returned it.
    expect(done.state.outcome?.result?.refunded === done.state.amount, 'the refund ran with the claim amount', done);
    return { done };
}

const [phase, ...rest] = process.argv.slice(2);
let client;
try {
    let summary;
    if (phase === 'start' && rest.length >= 1) {
        client = await connect(rest[0], rest.slice(1));
        summary = await start(client);
    } else if (phase === 'resume' && rest.length >= 2) {
        client = await connect(rest[1], rest.slice(2));
        summary = await resume(client, rest[0]);
    } else {
        fail('usage: ts_client.mjs start <program> [args..] | resume <thread> <program> [args..]');
    }
    process.stdout.write(`${JSON.stringify(summary)}\n`);
} catch (error) {
    fail(`the MCP exchange failed: ${error?.stack ?? error}`);
} finally {
    await client?.close();
}
