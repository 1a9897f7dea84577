/**
 * `--log-format`: JSON lines (the default wherever stdout is not a terminal),
 * or pretty (pino-pretty), one line per event, coloured unless `NO_COLOR` is
 * set. Pretty applies to the primary's lines and the workers' JSON lines
 * forwarded through it; the app's own output passes through untouched.
 */
import type {LineDestination} from '../logger.js';
import type {LineSink} from './output.js';

export const LOG_FORMATS = ['json', 'pretty'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

export interface LogFormatChoice {
	readonly format: LogFormat;
	readonly colorize: boolean;
}

export function chooseLogFormat(flag: LogFormat | undefined, isTTY: boolean, env: NodeJS.ProcessEnv): LogFormatChoice {
	const format = flag ?? (isTTY ? 'pretty' : 'json');
	const noColor = env['NO_COLOR'] !== undefined && env['NO_COLOR'] !== '';
	return {format, colorize: format === 'pretty' && isTTY && !noColor};
}

type Prettify = (line: Record<string, unknown>) => string;

/** One JSON log line as one pretty line; undefined for anything that is not a JSON object. */
export function prettyLine(prettify: Prettify, line: string): string | undefined {
	if (!line.startsWith('{')) {
		return undefined;
	}

	let parsed: unknown;
	try {
		parsed = JSON.parse(line);
	} catch {
		return undefined;
	}

	if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
		return undefined;
	}

	// "worker 3: msg" for a worker's own lines, "primary: msg" for the primary's
	// (whose lines about a worker keep their `worker` field).
	const {role, worker, pid: _pid, ...rest} = parsed as Record<string, unknown>;
	// eslint-disable-next-line @typescript-eslint/no-base-to-string -- fields of a parsed JSON line: a number or a string
	const source = role === 'worker' && worker !== undefined ? `worker ${String(worker)}` : String(role ?? 'app');
	try {
		return prettify({...rest, ...(role !== 'worker' && worker !== undefined ? {worker} : {}), source});
	} catch {
		// The app's own JSON need not be a log line pino-pretty understands (a
		// `level` that is an object throws in it): it passes through untouched, and
		// the primary, with every worker and request, does not go down over it.
		return undefined;
	}
}

/** A sink that pretty-prints each whole JSON line written to it and passes the rest through. */
export class PrettySink implements LineSink, LineDestination {
	constructor(private readonly target: LineSink, private readonly prettify: Prettify) {}

	/** Bytes after the last newline (a piece of an overlong line) go out as they came. */
	write(data: string | Buffer): void {
		const bytes = typeof data === 'string' ? Buffer.from(data) : data;
		const out: Buffer[] = [];
		let start = 0;
		for (let end = bytes.indexOf(0x0A); end !== -1; end = bytes.indexOf(0x0A, start)) {
			const line = bytes.subarray(start, end + 1);
			// Only what starts like a JSON object is worth decoding: the rest is the app's, as it is.
			const pretty = line[0] === 0x7B ? prettyLine(this.prettify, line.subarray(0, -1).toString('utf8')) : undefined;
			out.push(pretty === undefined ? line : Buffer.from(pretty));
			start = end + 1;
		}

		out.push(bytes.subarray(start));
		this.target.write(Buffer.concat(out));
	}
}

/** Builds pino-pretty's formatter (loaded only when pretty is chosen) around `target`. */
export async function prettySink(target: LineSink, colorize: boolean): Promise<PrettySink> {
	const {prettyFactory} = (await import('pino-pretty')).default;
	const prettify = prettyFactory({
		colorize,
		singleLine: true,
		translateTime: 'SYS:HH:MM:ss.l',
		ignore: 'hostname,source',
		messageFormat: '{source}: {msg}',
	}) as Prettify;
	return new PrettySink(target, prettify);
}
