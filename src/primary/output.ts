/**
 * Workers' stdout and stderr, forwarded to ours a whole line at a time. A line
 * the app leaves unfinished is held until the app ends it, and our own log
 * line written meanwhile goes out first, whole (own-lines.ts).
 */
import {fstatSync} from 'node:fs';
import type {Readable} from 'node:stream';
import {OwnLines} from './own-lines.js';

/** A line longer than this is written in pieces rather than held in memory. */
const MAX_LINE = 1024 * 1024;
const NEWLINE = 0x0A;
const NEWLINE_BYTES = Buffer.from('\n');
const EMPTY = Buffer.alloc(0);

/** Anything with a synchronous `write`: a worker's bytes go out as they came, even text that is not UTF-8. */
export interface LineSink {
	/** `from`: who writes (a forwarder), for a LineOutput; a sink that is not one ignores it. */
	write(data: string | Buffer, from?: object): unknown;
}

/**
 * The primary's stdout or stderr, shared by its logger and every worker's
 * forwarder. A forwarder writes whole lines, except a piece of a line longer
 * than MAX_LINE (a progress meter redrawn with `\r` never writes a newline):
 * the next writer that is not that forwarder then starts a line of its own
 * first, so no other line lands inside the app's.
 */
export class LineOutput implements LineSink {
	/** `line`: shared by stdout's and stderr's when both are one file (`sharedLine`). */
	constructor(private readonly target: LineSink, private readonly line: LineState = {midLine: undefined}) {}

	/** From the logger (`write(line)`), or from a forwarder, which says so. */
	write(data: string | Buffer, from: object = this): unknown {
		if (data.length === 0) {
			return undefined;
		}

		if (this.line.midLine !== undefined && this.line.midLine !== from) {
			this.target.write(NEWLINE_BYTES);
		}

		const last = typeof data === 'string' ? data.charCodeAt(data.length - 1) : data[data.length - 1];
		this.line.midLine = last === NEWLINE ? undefined : from;
		return this.target.write(data);
	}
}

export interface LineState {
	midLine: object | undefined;
}

/** One line state for two descriptors that are one file (`2>&1`, a terminal, the journal); otherwise undefined. */
export function sharedLine(fd: number, other: number): LineState | undefined {
	try {
		const [a, b] = [fstatSync(fd), fstatSync(other)];
		return a.dev === b.dev && a.ino === b.ino ? {midLine: undefined} : undefined;
	} catch {
		return undefined;
	}
}

export interface ForwarderOptions {
	/** The worker's pid: its own log lines are kept whole (own-lines.ts). */
	readonly workerPid?: number | undefined;
	/** Each whole line, decoded, for reading only (the crash report, a hung worker's stack). */
	readonly onLine?: ((line: string) => void) | undefined;
}

export class LineForwarder {
	private pending: Buffer<ArrayBufferLike> = EMPTY;
	/** A piece of an overlong line is out, that line not ended yet: the output is mid-line. */
	private pieceOut = false;
	private readonly ownLines: OwnLines | undefined;
	private readonly onLine: ((line: string) => void) | undefined;

	constructor(private readonly target: LineSink, {workerPid, onLine}: ForwarderOptions = {}) {
		this.ownLines = workerPid === undefined ? undefined : new OwnLines(workerPid);
		this.onLine = onLine;
	}

	/** Resolves once the source has ended (its last line passed on) or failed. */
	attach(source: Readable): Promise<void> {
		source.on('data', (chunk: Buffer) => {
			this.push(chunk);
		});
		return new Promise(resolve => {
			const done = (): void => {
				this.flush();
				resolve();
			};

			source.once('end', done);
			source.once('close', done);
			// A worker killed mid-write can leave the pipe in error; the exit is reported elsewhere.
			source.once('error', done);
		});
	}

	push(chunk: Buffer | string): void {
		let bytes: Buffer<ArrayBufferLike> = this.pending.length === 0 ? Buffer.from(chunk) : Buffer.concat([this.pending, Buffer.from(chunk)]);
		for (let last = bytes.lastIndexOf(NEWLINE); last !== -1; last = bytes.lastIndexOf(NEWLINE)) {
			const complete = bytes.subarray(0, last + 1);
			// One search per chunk, not per line, and all the common case pays: about
			// 0.1 µs a chunk (what the copy above costs a short one), 1 µs for 64 KiB.
			const glued = this.ownLines?.gluedIn(complete, this.pieceOut);
			if (glued === undefined) {
				this.pass(complete);
				bytes = bytes.subarray(last + 1);
				break;
			}

			// Our line comes out whole; the app's unfinished line stays held, and what
			// followed ours goes on from its end, as the app wrote it.
			const appLine = glued.start === 0 ? 0 : bytes.lastIndexOf(NEWLINE, glued.start - 1) + 1;
			// After a piece of the app's overlong line, ours starts a line of its own.
			const before = appLine === 0 && this.pieceOut ? NEWLINE_BYTES : bytes.subarray(0, appLine);
			this.pass(Buffer.concat([before, bytes.subarray(glued.start, glued.end)]));
			bytes = Buffer.concat([bytes.subarray(appLine, glued.start), bytes.subarray(glued.end)]);
		}

		this.pending = bytes;
		if (this.pending.length > MAX_LINE) {
			bytes = this.pending;
			this.pending = EMPTY;
			this.target.write(bytes, this);
			this.pieceOut = true;
			this.onLine?.(bytes.toString('utf8'));
		}
	}

	private pass(complete: Buffer): void {
		this.target.write(complete, this);
		this.pieceOut = false;
		if (this.onLine) {
			for (const line of complete.toString('utf8').split('\n')) {
				if (line !== '') {
					this.onLine(line);
				}
			}
		}
	}

	flush(): void {
		if (this.pending.length > 0) {
			const bytes = this.pending;
			this.pending = EMPTY;
			this.target.write(Buffer.concat([bytes, NEWLINE_BYTES]), this);
			this.pieceOut = false;
			this.onLine?.(bytes.toString('utf8'));
		}
	}
}

/** The last `size` lines, for the crash report. */
export class LastLines {
	private readonly lines: string[] = [];

	constructor(private readonly size = 30) {}

	readonly add = (line: string): void => {
		this.lines.push(line.length > 2000 ? `${line.slice(0, 2000)}…` : line);
		if (this.lines.length > this.size) {
			this.lines.shift();
		}
	};

	get text(): string[] {
		return [...this.lines];
	}
}
