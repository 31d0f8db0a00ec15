// What the end-to-end tests share: starting `turbokv serve` (and other services) on 127.0.0.1
// with a free port, stopping them with a bounded wait, reading /metrics, polling with a deadline.
// Every child is tracked, so a test file's after() can kill what a failed test left running.
import { spawn } from 'node:child_process';
import net from 'node:net';

export const TOOL = process.env.TURBOKV_TOOL ?? 'build/turbokv';

const children = [];

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// Spawns a child; `started` resolves once `ready` matches its output (stdout and stderr), and
// rejects on exit, spawn error or after `ms`.
export function startChild(cmd, args, ready, what, ms = 60000) {
  const proc = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(proc);
  let out = '';
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const started = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what} did not start: ${out}`)), ms);
    const onData = (d) => {
      out += d;
      if (ready(out)) { clearTimeout(timer); resolve(); }
    };
    proc.stdout.on('data', onData);
    proc.stderr.on('data', onData);
    proc.on('error', (e) => { clearTimeout(timer); reject(new Error(`${what}: ${e.message}`)); });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`${what} exited ${code}: ${out}`)); });
  });
  return { proc, exited, started, output: () => out };
}

// `turbokv serve --port 0 ...args`, resolved once it is listening and ready; `.url` is its base.
export async function startServe(args, ms = 60000) {
  const s = startChild(TOOL, ['serve', '--port', '0', ...args],
    (o) => /listening on http:\/\/\S+/.test(o) && o.includes('ready'), 'turbokv serve', ms);
  await s.started;
  s.url = s.output().match(/listening on (http:\/\/\S+)/)[1];
  return s;
}

// Sends `signal` and waits up to 30 s for the exit: {code, signal}, {code: 'timeout'}, or null
// when the child had already exited.
export async function stop(child, signal = 'SIGTERM') {
  if (!child || child.proc.exitCode !== null || child.proc.signalCode !== null) return null;
  child.proc.kill(signal);
  let timer;
  const timeout = new Promise((r) => { timer = setTimeout(() => r({ code: 'timeout' }), 30000); });
  const result = await Promise.race([child.exited, timeout]);
  clearTimeout(timer);  // a pending timer would keep node alive for its 30 s
  return result;
}

// For after(): whatever is still running is killed.
export function killAll() {
  for (const c of children) {
    if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  }
}

// /metrics as {name: value} for the unlabelled turbokv_* series; `key` for a server with --api-key.
export async function metrics(url, key) {
  const headers = key ? { Authorization: `Bearer ${key}` } : {};
  const text = await (await fetch(`${url}/metrics`, { headers, signal: AbortSignal.timeout(10000) })).text();
  const values = {};
  for (const line of text.split('\n')) {
    const m = line.match(/^(turbokv_[a-z_]+)\s+([0-9.e+-]+)$/);
    if (m) values[m[1]] = Number(m[2]);
  }
  return values;
}

export async function waitFor(predicate, what, ms = 10000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await predicate()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}
