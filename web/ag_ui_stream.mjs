// Reads a thread's event stream (`GET /api/threads/THREAD/stream`) with the AG-UI client,
// `@ag-ui/client`: its HttpAgent makes the request, parses the server-sent events, checks each
// against the protocol's event schemas, verifies their order (a run opens with RUN_STARTED,
// steps and messages close before RUN_FINISHED, ...) and applies them to the agent's messages
// and state. Prints one JSON line per event the agent delivered, then one line
// `{"ids": [...], "state": ..., "messages": [...], "pendingInterrupts": [...]}`: the SSE `id:`
// lines as they came on the wire, the state and messages the client folded from the events, and
// the interrupts it holds pending (from a RUN_FINISHED's interrupt outcome). Stops after N runs ended
// (RUN_FINISHED or RUN_ERROR). Exit code 1 when the client refused the stream (the error on
// stderr), 2 for a usage error, 3 when the runs did not end in time.
//
//   node ag_ui_stream.mjs URL [--token TOKEN] [--after EVENT_ID] [--runs N] [--timeout SECONDS]
import { EventType, HttpAgent } from "@ag-ui/client";

const usage =
  "usage: node ag_ui_stream.mjs URL [--token TOKEN] [--after EVENT_ID] [--runs N] [--timeout SECONDS]";
const args = process.argv.slice(2);
const options = { url: undefined, token: undefined, after: undefined, runs: 1, timeout: 60 };
for (let i = 0; i < args.length; i++) {
  const value = () => {
    if (i + 1 >= args.length) {
      console.error(`${args[i]} needs a value; ${usage}`);
      process.exit(2);
    }
    return args[++i];
  };
  switch (args[i]) {
    case "--token":
      options.token = value();
      break;
    case "--after":
      options.after = value();
      break;
    case "--runs":
      options.runs = Number(value());
      break;
    case "--timeout":
      options.timeout = Number(value());
      break;
    default:
      if (options.url === undefined && !args[i].startsWith("--")) {
        options.url = args[i];
      } else {
        console.error(`unknown argument \`${args[i]}\`; ${usage}`);
        process.exit(2);
      }
  }
}
if (!options.url || !(options.runs >= 1) || !(options.timeout > 0)) {
  console.error(usage);
  process.exit(2);
}

// The SSE ids, read from a copy of the response body: the client's own parser reads the same
// bytes and keeps only the `data:` lines.
const ids = [];
async function collectIds(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let pending = "";
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      pending += decoder.decode(value, { stream: true });
      const lines = pending.split(/\r\n|\r|\n/);
      pending = lines.pop();
      for (const line of lines) {
        if (line.startsWith("id:")) ids.push(line.slice(3).trimStart());
      }
    }
  } catch {
    // Aborted once the runs ended.
  }
}

/** An HttpAgent that follows a thread's stream: a GET with the reader's headers. */
class ThreadStream extends HttpAgent {
  requestInit(_input) {
    const headers = { ...this.headers, Accept: "text/event-stream" };
    if (options.token) headers.Authorization = `Bearer ${options.token}`;
    if (options.after) headers["Last-Event-ID"] = options.after;
    return { method: "GET", headers, signal: this.abortController.signal };
  }
}

const agent = new ThreadStream({
  url: options.url,
  fetch: async (url, init) => {
    const response = await fetch(url, init);
    if (!response.body) return response;
    const [forClient, forIds] = response.body.tee();
    collectIds(forIds);
    return new Response(forClient, { status: response.status, statusText: response.statusText, headers: response.headers });
  },
});

const timer = setTimeout(() => {
  console.error(`the stream did not end ${options.runs} run(s) within ${options.timeout} s`);
  process.exit(3);
}, options.timeout * 1000);

let ended = 0;
let failure;
try {
  await agent.runAgent(
    {},
    {
      onEvent({ event }) {
        // Aborting the request once the runs ended makes the client report the abort: not an
        // event of the stream.
        if (ended >= options.runs) return;
        console.log(JSON.stringify(event));
        if (event.type === EventType.RUN_FINISHED || event.type === EventType.RUN_ERROR) {
          ended += 1;
          if (ended >= options.runs) agent.abortRun();
        }
      },
      onRunFailed({ error }) {
        failure = error;
      },
    },
  );
} catch (error) {
  failure = error;
}
clearTimeout(timer);
if (ended < options.runs) {
  console.error(`the AG-UI client refused the stream: ${failure?.message ?? failure ?? "it ended early"}`);
  process.exit(1);
}
console.log(
  JSON.stringify({ ids, state: agent.state, messages: agent.messages, pendingInterrupts: agent.pendingInterrupts }),
);
process.exit(0);
