/**
 * Workers' stdout and stderr, forwarded to ours a whole line at a time.
 *
 * Workers run with piped stdio (`silent: true`) so that two workers writing at
 * once cannot interleave half-lines in the container's log, and so that the
 * primary keeps the last lines a worker wrote to stderr: when an app crashes
 * before it listens, that is the reason, and we repeat it when we give up.
 */
import type {Readable} from 'node:stream';

/**
 * Anything with a synchronous `write`: the primary passes pino's sync
 * destinations, in buffer mode, so a worker's bytes go out as they came (text
 * that is not UTF-8 included), and its own log lines as strings.
 */
export interface LineSink {
	write(data: string | Buffer): unknown;
}

/** A line longer than this is written in pieces rather than held in memory. */
const MAX_LINE = 1024 * 1024;
const NEWLINE = 0x0A;
const EMPTY = Buffer.alloc(0);

export class LineForwarder {
	private pending: Buffer<ArrayBufferLike> = EMPTY;

	constructor(private readonly target: LineSink, private readonly onLine?: (line: string) => void) {}

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

	/** Bytes, as the worker wrote them; a string is taken as UTF-8. */
	push(chunk: Buffer | string): void {
		let bytes: Buffer<ArrayBufferLike> = this.pending.length === 0 ? Buffer.from(chunk) : Buffer.concat([this.pending, Buffer.from(chunk)]);
		const last = bytes.lastIndexOf(NEWLINE);
		if (last === -1) {
			this.pending = bytes;
		} else {
			const complete = bytes.subarray(0, last + 1);
			this.pending = bytes.subarray(last + 1);
			this.target.write(complete);
			if (this.onLine) {
				// Decoded for reading only (the crash report, a hung worker's stack); what went out is the bytes.
				for (const line of complete.toString('utf8').split('\n')) {
					if (line !== '') {
						this.onLine(line);
					}
				}
			}
		}

		if (this.pending.length > MAX_LINE) {
			bytes = this.pending;
			this.pending = EMPTY;
			this.target.write(bytes);
			this.onLine?.(bytes.toString('utf8'));
		}
	}

	flush(): void {
		if (this.pending.length > 0) {
			const bytes = this.pending;
			this.pending = EMPTY;
			this.target.write(Buffer.concat([bytes, Buffer.from('\n')]));
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
