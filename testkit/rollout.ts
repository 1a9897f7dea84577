/**
 * The rollout harness: HAProxy on loopback in front of two "pods", steady
 * keep-alive load through it, SIGTERM to pod 1 alone (as the kubelet does), a
 * replacement on the same port, and every client-visible outcome classified.
 *
 * Shared by test/rollout/rollout.test.ts and bench/rollout.js (which imports the
 * compiled dist/testkit/rollout.js), so it knows nothing of ava: every process
 * it starts is registered on a `Cleanup` that the caller runs (ava's
 * t.teardown, or the bench's finally).
 */
import {spawnSync} from 'node:child_process';
import {mkdtempSync, rmSync, writeFileSync} from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import {performance} from 'node:perf_hooks';
import {setTimeout as sleep} from 'node:timers/promises';
import {ABNORMAL_CLOSE, HandshakeRejected, openWs} from './long-lived.js';
import {freePorts, isListening} from './net.js';
import {cleanEnv, spawnGroup, waitUntil, type GroupProcess, type Line} from './proc.js';

// ---------------------------------------------------------------------------
// Processes

/** Teardown actions, run last-in first-out. */
export class Cleanup {
	private readonly actions: Array<() => unknown> = [];

	add(action: () => unknown): void {
		this.actions.push(action);
	}

	async run(): Promise<void> {
		while (this.actions.length > 0) {
			try {
				await this.actions.pop()!();
			} catch {}
		}
	}
}

export interface Command {
	readonly argv: readonly string[];
	readonly env?: Readonly<Record<string, string>>;
	readonly cwd?: string;
}

/** A pod, HAProxy: raw output lines, both streams. */
export type Proc = GroupProcess<Line>;

/** Starts `command` in its own process group; the cleanup kills the group. */
export function startProc(name: string, command: Command, cleanup: Cleanup): Proc {
	const [file, ...args] = command.argv;
	const proc = spawnGroup(file!, args, {name, cwd: command.cwd, env: cleanEnv(command.env)});
	cleanup.add(async () => {
		if (!proc.exit) {
			proc.stop();
			await proc.exitWithin(3000);
		}

		// Workers may outlive a primary; the group kill reaches them too.
		proc.stop();
	});
	return proc;
}

// ---------------------------------------------------------------------------
// HTTP client and outcome classes

/** Every way a request can fail that leaves the client unsure whether it was processed. */
export type AmbiguousKind =
	| 'reset' | 'refused' | 'timeout' | 'empty-reply' | 'truncated'
	| '502' | '504' | '503-no-retry-after' | 'other-status' | 'bad-body' | 'other-error';

export type Outcome = 'ok' | '503-retry-after' | AmbiguousKind;

interface Reply {
	readonly status?: number;
	readonly headers?: http.IncomingHttpHeaders;
	readonly body?: string;
	readonly error?: AmbiguousKind;
	readonly detail?: string;
}

function errorKind(error: NodeJS.ErrnoException): AmbiguousKind {
	if (error.code === 'ECONNREFUSED') {
		return 'refused';
	}

	// Node's "socket hang up": the connection ended before any response byte.
	if (error.message === 'socket hang up') {
		return 'empty-reply';
	}

	if (error.code === 'ECONNRESET' || error.code === 'EPIPE') {
		return 'reset';
	}

	return 'other-error';
}

export interface RequestSpec {
	readonly port: number;
	readonly method: 'GET' | 'POST';
	readonly path: string;
	readonly body?: string;
	readonly headers?: Readonly<Record<string, string>>;
	readonly agent: http.Agent | false;
	readonly timeoutMs: number;
}

export async function send(spec: RequestSpec): Promise<Reply> {
	return new Promise(resolve => {
		let settled = false;
		const finish = (reply: Reply) => {
			if (!settled) {
				settled = true;
				resolve(reply);
			}
		};

		const request = http.request({
			host: '127.0.0.1',
			port: spec.port,
			method: spec.method,
			path: spec.path,
			agent: spec.agent,
			headers: {
				...spec.headers,
				...(spec.body === undefined ? {} : {'content-type': 'text/plain', 'content-length': String(Buffer.byteLength(spec.body))}),
			},
		}, response => {
			const chunks: Buffer[] = [];
			response.on('data', (chunk: Buffer) => chunks.push(chunk));
			response.on('end', () => {
				finish({status: response.statusCode, headers: response.headers, body: Buffer.concat(chunks).toString()});
			});
			response.on('error', error => {
				finish({error: 'truncated', detail: error.message});
			});
			response.on('close', () => {
				if (!response.complete) {
					finish({error: 'truncated', detail: `status ${response.statusCode}, body cut after ${chunks.reduce((n, c) => n + c.length, 0)} bytes`});
				}
			});
		});
		request.setTimeout(spec.timeoutMs, () => {
			finish({error: 'timeout', detail: `no reply within ${spec.timeoutMs} ms`});
			request.destroy();
		});
		request.on('error', (error: NodeJS.ErrnoException) => {
			finish({error: errorKind(error), detail: `${error.code ?? ''} ${error.message}`});
		});
		request.end(spec.body);
	});
}

/** Classifies a reply; `expectBody` checks a 2xx body (a wrong body is a failure too). */
export function classify(reply: Reply, expectBody: (body: string) => boolean): Outcome {
	if (reply.error) {
		return reply.error;
	}

	const status = reply.status!;
	if (status >= 200 && status < 300) {
		return expectBody(reply.body ?? '') ? 'ok' : 'bad-body';
	}

	if (status === 503) {
		return reply.headers?.['retry-after'] === undefined ? '503-no-retry-after' : '503-retry-after';
	}

	if (status === 502) {
		return '502';
	}

	if (status === 504) {
		return '504';
	}

	return 'other-status';
}

export interface Sample {
	/** ms since the signal (negative: before it). */
	readonly atMs: number;
	readonly outcome: Outcome;
	readonly request: string;
	readonly detail: string;
}

/** Counts per outcome, with the time span of each and a few samples of failures. */
export class Tally {
	readonly counts = new Map<Outcome, number>();
	readonly spans = new Map<Outcome, {first: number; last: number}>();
	readonly samples: Sample[] = [];
	total = 0;

	constructor(private readonly origin: () => number) {}

	add(outcome: Outcome, request: string, reply: Reply): void {
		this.total++;
		this.counts.set(outcome, (this.counts.get(outcome) ?? 0) + 1);
		const atMs = Math.round(performance.now() - this.origin());
		const span = this.spans.get(outcome);
		if (span) {
			span.last = atMs;
		} else {
			this.spans.set(outcome, {first: atMs, last: atMs});
		}

		if (outcome !== 'ok' && outcome !== '503-retry-after' && this.samples.length < 20) {
			const detail = reply.error ? reply.detail ?? '' : `status ${reply.status}: ${(reply.body ?? '').slice(0, 80).trim()}`;
			this.samples.push({atMs, outcome, request, detail});
		}
	}

	get(outcome: Outcome): number {
		return this.counts.get(outcome) ?? 0;
	}

	/** Ambiguous failures by kind (everything but 2xx and 503 + Retry-After). */
	ambiguous(): Record<string, number> {
		const result: Record<string, number> = {};
		for (const [outcome, n] of this.counts) {
			if (outcome !== 'ok' && outcome !== '503-retry-after') {
				result[outcome] = n;
			}
		}

		return result;
	}
}

const POST_BODY = 'p'.repeat(4096);
/** The fixture apps' long response: 100 KB. */
export const LONG_BODY_BYTES = 100_000;

/** Closed-loop keep-alive clients: each owns one connection and sends GET / and POST /echo in turn. */
export class Load {
	readonly tally: Tally;
	private running = false;
	private loops: Array<Promise<void>> = [];
	private readonly agents: http.Agent[] = [];

	constructor(private readonly port: number, private readonly options: {clients: number; thinkMs: number; timeoutMs: number}, origin: () => number) {
		this.tally = new Tally(origin);
	}

	start(): void {
		this.running = true;
		for (let i = 0; i < this.options.clients; i++) {
			const agent = new http.Agent({keepAlive: true, maxSockets: 1});
			this.agents.push(agent);
			this.loops.push(this.loop(agent, i));
		}
	}

	async stop(): Promise<void> {
		this.running = false;
		await Promise.all(this.loops);
		for (const agent of this.agents) {
			agent.destroy();
		}
	}

	private async loop(agent: http.Agent, index: number): Promise<void> {
		let n = index;
		while (this.running) {
			const post = n++ % 2 === 1;
			const reply = await send({
				port: this.port,
				method: post ? 'POST' : 'GET',
				path: post ? '/echo' : '/',
				body: post ? POST_BODY : undefined,
				agent,
				timeoutMs: this.options.timeoutMs,
			});
			this.tally.add(classify(reply, body => body === (post ? String(POST_BODY.length) : 'hello')), post ? 'POST /echo' : 'GET /', reply);
			if (this.options.thinkMs > 0) {
				// The client's think time: the load's pace, not a wait for anything.
				await sleep(this.options.thinkMs);
			}
		}
	}
}

/** What the WebSocket clients saw during a rollout. */
export interface WsResult {
	readonly clients: number;
	/** Handshakes that opened (the first of each client included). */
	readonly opened: number;
	/** Server-initiated closes, by code (1001 going away, 1012 restart, 1006 abnormal: cut without a close frame). */
	readonly closes: Record<string, number>;
	/** Closes with 1006: the promise is none. */
	readonly abnormal: number;
	/** Reconnect handshakes answered 503 + Retry-After (a draining pod before the LB noticed): retried after it, not a failure. */
	readonly retriedAfter503: number;
	/** Reconnects that failed any other way (reset, refused, 502, a 503 without Retry-After, timeout). */
	readonly failedConnects: number;
	/** Messages echoed. */
	readonly echoes: number;
	readonly failures: readonly string[];
}

/**
 * WebSocket clients through the LB: each connects, echoes a message every
 * `thinkMs`, and when the server closes it, reconnects at once, as a
 * reconnecting client library does (after `Retry-After` on a 503).
 */
export class WsLoad {
	private running = false;
	private loops: Array<Promise<void>> = [];
	private readonly open = new Set<ReturnType<typeof openWs>>();
	private readonly counts = {opened: 0, abnormal: 0, retriedAfter503: 0, failedConnects: 0, echoes: 0};
	private readonly closes: Record<string, number> = {};
	private readonly failures: string[] = [];

	constructor(private readonly port: number, private readonly clients: number, private readonly path = '/ws', private readonly thinkMs = 100) {}

	start(): void {
		this.running = true;
		for (let i = 0; i < this.clients; i++) {
			this.loops.push(this.loop());
		}
	}

	async stop(): Promise<WsResult> {
		this.running = false;
		for (const client of this.open) {
			client.ws.close(1000);
		}

		await Promise.all(this.loops);
		return {clients: this.clients, ...this.counts, closes: {...this.closes}, failures: [...this.failures]};
	}

	private async loop(): Promise<void> {
		while (this.running) {
			const client = openWs(`ws://127.0.0.1:${this.port}${this.path}`);
			try {
				await client.opened;
			} catch (error) {
				if (error instanceof HandshakeRejected && error.status === 503 && error.headers['retry-after'] !== undefined) {
					this.counts.retriedAfter503++;
					// What a reconnecting client does: it waits as long as Retry-After says.
					await sleep(Number(error.headers['retry-after']) * 1000);
				} else if (this.running) {
					this.counts.failedConnects++;
					this.failures.push(error instanceof HandshakeRejected ? `handshake ${error.status}` : String((error as NodeJS.ErrnoException).code ?? error));
					// A reconnecting client's back-off after a failed handshake.
					await sleep(200);
				}

				continue;
			}

			this.counts.opened++;
			this.open.add(client);
			let closed = false;
			void client.closed.then(() => {
				closed = true;
			});
			while (!closed && this.running) {
				const reply = await Promise.race([client.echo('ping'), client.closed.then(() => undefined), sleep(5000).then(() => 'timeout')]);
				if (reply === 'ping') {
					this.counts.echoes++;
				}

				await sleep(this.thinkMs);
			}

			const {code} = await client.closed;
			this.open.delete(client);
			if (this.running || code !== 1000) {
				this.closes[code] = (this.closes[code] ?? 0) + 1;
				if (code === ABNORMAL_CLOSE) {
					this.counts.abnormal++;
				}
			}
		}
	}
}

// ---------------------------------------------------------------------------
// HAProxy

/** Active health checks, as an ALB target group would run them (faster). */
export const HEALTH_CHECK = {interMs: 1000, fall: 2, rise: 1} as const;

export type LbMode = 'checks' | 'retries';

export interface Scenario {
	readonly id: 1 | 2 | 3;
	readonly name: string;
	readonly lb: LbMode;
	/** Pods keep serving for a while after the signal (graceful-cluster's --serve-period). */
	readonly serve: boolean;
}

export const SCENARIOS: readonly Scenario[] = [
	{id: 1, name: 'health checks, no retries', lb: 'checks', serve: false},
	{id: 2, name: 'health checks, no retries, serve period', lb: 'checks', serve: true},
	{id: 3, name: 'health checks + retry-on 503 + redispatch', lb: 'retries', serve: false},
];

/** The path of the haproxy binary; throws a message that says how to install it. */
export function haproxyBinary(): string {
	const result = spawnSync('haproxy', ['-v'], {encoding: 'utf8'});
	if (result.error || result.status !== 0) {
		throw new Error('haproxy is not installed (or not on PATH): the rollout test puts HAProxy in front of two pods. Install it with `apt-get install -y haproxy` (Debian/Ubuntu; .ci/run does this) and run the test again.');
	}

	return 'haproxy';
}

export interface PodAddress {
	readonly name: string;
	readonly port: number;
	readonly checkPort: number;
}

export function haproxyConfig(lbPort: number, pods: readonly PodAddress[], mode: LbMode, checkPath: string): string {
	const {interMs, fall, rise} = HEALTH_CHECK;
	const retries = mode === 'retries'
		? [
			// What HAProxy (and Envoy) users configure: retry a request that never
			// reached a server, got no response at all, or got a 503, on another server.
			'    retries 3',
			'    option redispatch 1',
			'    retry-on conn-failure empty-response 503',
		]
		// ALB-like: whatever the chosen server answers (or fails with) is the answer.
		: ['    retries 0'];
	return [
		'global',
		'    log stdout format raw local0 info',
		'    maxconn 2000',
		'defaults',
		'    mode http',
		'    log global',
		'    option dontlognull',
		'    timeout connect 2s',
		'    timeout client 30s',
		'    timeout server 30s',
		'    timeout http-keep-alive 30s',
		'    timeout check 1s',
		...retries,
		'frontend fe',
		`    bind 127.0.0.1:${lbPort}`,
		// One line per request: server, status, method, uri, active time, termination state.
		'    log-format "REQ %s %ST %HM %HU %Ta %ts"',
		'    default_backend be',
		'backend be',
		'    balance roundrobin',
		`    option httpchk GET ${checkPath}`,
		'    http-check expect status 200',
		// Long requests are pinned to a pod to be in flight there when the signal comes.
		...pods.map(pod => `    use-server ${pod.name} if { req.hdr(x-pin) -m str ${pod.name} }`),
		...pods.map(pod => `    server ${pod.name} 127.0.0.1:${pod.port} check port ${pod.checkPort} inter ${interMs} fall ${fall} rise ${rise}`),
		'',
	].join('\n');
}

const REQUEST_LINE = /^REQ (\S+) (-?\d+) (\S+) (\S+) (-?\d+) (\S+)/;

interface LoggedRequest {
	readonly at: number;
	readonly server: string;
	readonly uri: string;
	readonly activeMs: number;
}

function loggedRequests(haproxy: Proc): LoggedRequest[] {
	const result: LoggedRequest[] = [];
	for (const line of haproxy.lines) {
		const match = REQUEST_LINE.exec(line.text);
		if (match) {
			result.push({at: line.at, server: match[1]!, uri: match[4]!, activeMs: Math.max(0, Number(match[5]))});
		}
	}

	return result;
}

const stateLine = (server: string, state: 'UP' | 'DOWN') => (line: Line) => line.text.includes(`Server be/${server} is ${state}`);
const count = (proc: Proc, test: (line: Line) => boolean): number => proc.lines.filter(line => test(line)).length;

// ---------------------------------------------------------------------------
// The scenario

export interface PodContext {
	readonly port: number;
	readonly checkPort: number;
	readonly scenario: Scenario;
	/** A scratch directory of this pod's own (e.g. PM2_HOME). */
	readonly home: string;
	/** 'pod1', 'pod1-replacement', 'pod2'. */
	readonly name: string;
}

export interface Variant {
	readonly name: string;
	/** The command that runs one pod on `context.port`. */
	pod(context: PodContext): Command;
	/** Readiness answers on `checkPort` instead of the app's port (lightship). */
	readonly separateCheckPort?: boolean;
	/** @default '/readyz' */
	readonly checkPath?: string;
}

export interface RunOptions {
	readonly variant: Variant;
	readonly scenario: Scenario;
	readonly clients?: number;
	readonly thinkMs?: number;
	readonly requestTimeoutMs?: number;
	readonly longRequests?: number;
	readonly longMs?: number;
	/** Steady load before the signal, for the run to have a stretch before it: a period of the scenario, not a wait for anything. @default 1500 */
	readonly warmupMs?: number;
	/** Earliest start of the replacement, after the signal (it also waits for the port to be free): a period of the scenario, not a wait for anything. @default 3000 */
	readonly replacementDelayMs?: number;
	/** Requests the replacement must serve before the load stops. */
	readonly replacementRequests?: number;
	/** Longest wait for pod 1 to exit after the signal; then its group is killed. */
	readonly exitTimeoutMs?: number;
	/** Text in pod 1's output that shows a long request reached the app. */
	readonly longStartedMarker?: string;
	/** WebSocket clients (`WsLoad`) on `webSocketPath` through the LB besides the HTTP load; none by default. */
	readonly webSockets?: number;
	/** @default '/ws' */
	readonly webSocketPath?: string;
	readonly log?: (message: string) => void;
}

export interface RunResult {
	readonly variant: string;
	readonly scenario: Scenario;
	readonly requests: number;
	readonly ok: number;
	readonly rejected: number;
	/** First and last 503 + Retry-After, ms since the signal. */
	readonly rejectedSpan: {first: number; last: number} | undefined;
	readonly ambiguous: Record<string, number>;
	readonly ambiguousTotal: number;
	readonly samples: readonly Sample[];
	/**
	 * The long requests pinned to pod 1. `rerun`: how many of them another pod
	 * started too (a retrying LB re-sent a request whose connection pod 1 dropped:
	 * it completes, but it ran twice).
	 */
	readonly inflight: {readonly sent: number; readonly completed: number; readonly rerun: number; readonly outcomes: readonly Outcome[]};
	/** Pod 1 after the signal: exit code/signal and ms to exit; `killed` when the harness had to. */
	readonly exit: {readonly code: number | null; readonly signal: string | null; readonly afterMs: number; readonly killed: boolean};
	/** ms from the signal until HAProxy marked pod 1 DOWN. */
	readonly detectionMs: number | undefined;
	/** ms from the signal to the start of the last load request HAProxy sent to the old pod 1. */
	readonly lastRoutedToOldMs: number | undefined;
	readonly replacement: {readonly startMs: number; readonly upMs: number | undefined; readonly served: number};
	/** What the WebSocket clients saw, when the run had some. */
	readonly webSockets: WsResult | undefined;
	readonly durationMs: number;
}

/** Waits until `port` answers `checkPath` with 200; throws early (with its output) if `pod` exits. */
export async function waitReady(port: number, checkPath: string, pod: Proc, timeoutMs = 20_000): Promise<void> {
	await waitUntil(async () => {
		if (pod.exit) {
			throw new Error(`${pod.name} exited before it was ready: ${JSON.stringify(pod.exit)}\n${pod.output()}`);
		}

		const reply = await send({port, method: 'GET', path: checkPath, agent: false, timeoutMs: 1000});
		return reply.status === 200;
	}, {timeout: timeoutMs, interval: 100, what: `${pod.name} ready on ${port}${checkPath}`});
}

/**
 * One rolling update of pod 1 behind HAProxy, under load. Every process is
 * registered on `cleanup`; the caller runs it (the result is complete before).
 */
export async function runRollout(options: RunOptions, cleanup: Cleanup): Promise<RunResult> {
	const {variant, scenario} = options;
	const clients = options.clients ?? 8;
	const longRequests = options.longRequests ?? 3;
	const longMs = options.longMs ?? 5000;
	const exitTimeoutMs = options.exitTimeoutMs ?? 30_000;
	const marker = options.longStartedMarker ?? 'fixture request started';
	const checkPath = variant.checkPath ?? '/readyz';
	const log = options.log ?? (() => {});
	const began = performance.now();
	const binary = haproxyBinary();

	const dir = mkdtempSync(path.join(os.tmpdir(), 'gc-rollout-'));
	cleanup.add(() => {
		rmSync(dir, {recursive: true, force: true});
	});
	const [lbPort, port1, port2, check1, check2] = await freePorts(5) as [number, number, number, number, number];
	const podCommand = (name: string, port: number, checkPort: number): Command => {
		const home = path.join(dir, name);
		return variant.pod({port, checkPort, scenario, home, name});
	};

	const checkPort1 = variant.separateCheckPort ? check1 : port1;
	const checkPort2 = variant.separateCheckPort ? check2 : port2;
	const pod1 = startProc('pod1', podCommand('pod1', port1, checkPort1), cleanup);
	const pod2 = startProc('pod2', podCommand('pod2', port2, checkPort2), cleanup);
	await Promise.all([waitReady(checkPort1, checkPath, pod1), waitReady(checkPort2, checkPath, pod2)]);
	// The app itself answers too (lightship's probe is on another port).
	await Promise.all([waitReady(port1, '/', pod1), waitReady(port2, '/', pod2)]);

	const configFile = path.join(dir, 'haproxy.cfg');
	writeFileSync(configFile, haproxyConfig(lbPort, [
		{name: 'pod1', port: port1, checkPort: checkPort1},
		{name: 'pod2', port: port2, checkPort: checkPort2},
	], scenario.lb, checkPath));
	const haproxy = startProc('haproxy', {argv: [binary, '-db', '-f', configFile]}, cleanup);
	await waitReady(lbPort, '/', haproxy);
	log(`${variant.name} / ${scenario.id}: pods on ${port1} and ${port2}, HAProxy on ${lbPort}`);

	let signalAt = Number.NaN;
	const sinceSignal = () => (Number.isNaN(signalAt) ? performance.now() : signalAt);
	const load = new Load(lbPort, {clients, thinkMs: options.thinkMs ?? 5, timeoutMs: options.requestTimeoutMs ?? 15_000}, sinceSignal);
	load.start();
	const wsLoad = options.webSockets ? new WsLoad(lbPort, options.webSockets, options.webSocketPath) : undefined;
	wsLoad?.start();
	try {
		await sleep(options.warmupMs ?? 1500);

		// A few long requests, pinned to pod 1, in flight when the signal comes.
		const inflightTally = new Tally(sinceSignal);
		const inflightOutcomes: Outcome[] = [];
		const before = count(pod1, line => line.text.includes(marker));
		const longs = Array.from({length: longRequests}, async (_, i) => {
			const reply = await send({
				port: lbPort, method: 'GET', path: `/slow?ms=${longMs}&id=long-${i}`, headers: {'x-pin': 'pod1'}, agent: false, timeoutMs: longMs + 20_000,
			});
			const outcome = classify(reply, body => body.length === LONG_BODY_BYTES);
			inflightTally.add(outcome, 'GET /slow', reply);
			inflightOutcomes.push(outcome);
		});
		await pod1.waitFor(line => line.text.includes(marker), {count: before + longRequests, timeout: 10_000, what: 'long requests started'});

		signalAt = pod1.signal('SIGTERM');
		log(`${variant.name} / ${scenario.id}: SIGTERM to pod 1 (pid ${pod1.pid})`);

		const pod1Exit = pod1.exitWithin(exitTimeoutMs);

		// The replacement: after a few seconds, once the old pod has let go of the port(s).
		await sleep(options.replacementDelayMs ?? 3000);
		await waitUntil(async () => !(await isListening(port1)) && !(variant.separateCheckPort && await isListening(checkPort1)), {timeout: exitTimeoutMs, interval: 100, what: 'pod 1\'s port free for the replacement'})
			.catch(() => {
				log(`${variant.name} / ${scenario.id}: pod 1 still holds its port; killing it to start the replacement`);
				pod1.stop();
			});
		await waitUntil(async () => !(await isListening(port1)), {timeout: 5000, interval: 100, what: 'pod 1\'s port free'});
		const replacementAt = performance.now();
		const upsBefore = count(haproxy, stateLine('pod1', 'UP'));
		const replacement = startProc('pod1-replacement', podCommand('pod1-replacement', port1, checkPort1), cleanup);
		const up = await haproxy.waitFor(stateLine('pod1', 'UP'), {count: upsBefore + 1, timeout: 20_000, what: 'HAProxy marking the replacement UP'})
			.catch((error: unknown) => {
				log(String(error));
				return undefined;
			});
		const upAt = up?.at;
		// Keep the load until the replacement has served for a while.
		const servedByReplacement = () => loggedRequests(haproxy).filter(r => r.server === 'pod1' && r.at - r.activeMs >= (upAt ?? replacementAt)).length;
		await waitUntil(() => servedByReplacement() >= (options.replacementRequests ?? 200), {timeout: 20_000, what: 'replacement serving'}).catch((error: unknown) => {
			log(String(error));
		});

		const exit = await pod1Exit;
		if (!exit) {
			log(`${variant.name} / ${scenario.id}: pod 1 did not exit within ${exitTimeoutMs} ms of the signal; killing it`);
			pod1.stop();
		}

		await Promise.all(longs);
		await load.stop();
		const webSockets = await wsLoad?.stop();

		const down = haproxy.lines.find(stateLine('pod1', 'DOWN'));
		const toOld = loggedRequests(haproxy).filter(r => r.server === 'pod1' && !r.uri.startsWith('/slow') && r.at - r.activeMs < replacementAt);
		const lastToOld = toOld.length > 0 ? Math.max(...toOld.map(r => r.at - r.activeMs)) : undefined;
		const tally = load.tally;
		const ambiguous = tally.ambiguous();
		const result: RunResult = {
			variant: variant.name,
			scenario,
			requests: tally.total,
			ok: tally.get('ok'),
			rejected: tally.get('503-retry-after'),
			rejectedSpan: tally.spans.get('503-retry-after'),
			ambiguous,
			ambiguousTotal: Object.values(ambiguous).reduce((a, b) => a + b, 0),
			samples: [...tally.samples, ...inflightTally.samples],
			inflight: {
				sent: longRequests,
				completed: inflightTally.get('ok'),
				rerun: [pod2, replacement].reduce((n, pod) => n + count(pod, line => line.text.includes(marker)), 0),
				outcomes: inflightOutcomes,
			},
			exit: exit
				? {code: exit.code, signal: exit.signal, afterMs: Math.round(exit.at - signalAt), killed: false}
				: {code: null, signal: 'SIGKILL', afterMs: Math.round(performance.now() - signalAt), killed: true},
			detectionMs: down && down.at > signalAt ? Math.round(down.at - signalAt) : undefined,
			lastRoutedToOldMs: lastToOld === undefined ? undefined : Math.round(lastToOld - signalAt),
			replacement: {startMs: Math.round(replacementAt - signalAt), upMs: upAt === undefined ? undefined : Math.round(upAt - signalAt), served: servedByReplacement()},
			webSockets,
			durationMs: Math.round(performance.now() - began),
		};
		return result;
	} finally {
		await load.stop();
		await wsLoad?.stop();
	}
}

/** One paragraph for t.log and the bench's progress output. */
export function describe(result: RunResult): string {
	const ms = (value: number | undefined) => (value === undefined ? 'n/a' : `${(value / 1000).toFixed(2)} s`);
	const ambiguous = Object.entries(result.ambiguous).map(([kind, n]) => `${kind} ${n}`).join(', ') || 'none';
	const span = result.rejectedSpan ? ` from ${ms(result.rejectedSpan.first)} to ${ms(result.rejectedSpan.last)} after the signal` : '';
	return [
		`${result.variant}, config ${result.scenario.id} (${result.scenario.name}):`,
		`  requests ${result.requests}, 2xx ${result.ok}, 503 + Retry-After ${result.rejected}${span}, ambiguous: ${ambiguous}`,
		`  in-flight long requests completed ${result.inflight.completed}/${result.inflight.sent} (${result.inflight.outcomes.join(', ')}), re-run on another pod: ${result.inflight.rerun}`,
		`  detection (SIGTERM -> HAProxy marks pod 1 DOWN) ${ms(result.detectionMs)}; last load request HAProxy logged as answered by the old pod 1 at ${ms(result.lastRoutedToOldMs)}`,
		`  pod 1 exit ${result.exit.killed ? 'none (killed by the harness)' : `code ${result.exit.code} signal ${result.exit.signal}`} after ${ms(result.exit.afterMs)}; replacement started at ${ms(result.replacement.startMs)}, UP at ${ms(result.replacement.upMs)}, served ${result.replacement.served}`,
		...(result.webSockets ? [`  WebSockets: ${result.webSockets.clients} clients, ${result.webSockets.opened} opened, closes by the server ${JSON.stringify(result.webSockets.closes)}, abnormal (1006) ${result.webSockets.abnormal}, reconnects answered 503 + Retry-After ${result.webSockets.retriedAfter503}, failed reconnects ${result.webSockets.failedConnects}${result.webSockets.failures.length > 0 ? ` (${result.webSockets.failures.slice(0, 5).join(', ')})` : ''}, echoes ${result.webSockets.echoes}`] : []),
		...result.samples.slice(0, 8).map(sample => `  sample: ${sample.atMs} ms ${sample.request} -> ${sample.outcome} (${sample.detail})`),
	].join('\n');
}
