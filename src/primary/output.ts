/**
 * Workers' stdout and stderr, forwarded to ours a whole line at a time.
 *
 * Workers run with piped stdio (`silent: true`) so that two workers writing at
 * once cannot interleave half-lines in the container's log, and so that the
 * primary keeps the last lines a worker wrote to stderr: when an app crashes
 * before it listens, that is the reason, and we repeat it when we give up.
 */
import type {Readable} from 'node:stream';

/** Anything with a synchronous `write`: the primary passes pino's sync destinations. */
export interface LineSink {
	write(text: string): unknown;
}

/** A line longer than this is written in pieces rather than held in memory. */
const MAX_LINE = 1024 * 1024;

export class LineForwarder {
	private pending = '';

	constructor(private readonly target: LineSink, private readonly onLine?: (line: string) => void) {}

	/** Resolves once the source has ended (its last line passed on) or failed. */
	attach(source: Readable): Promise<void> {
		source.setEncoding('utf8');
		source.on('data', (chunk: string) => {
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

	push(chunk: string): void {
		let text = this.pending + chunk;
		const last = text.lastIndexOf('\n');
		if (last === -1) {
			this.pending = text;
		} else {
			const complete = text.slice(0, last + 1);
			this.pending = text.slice(last + 1);
			this.target.write(complete);
			if (this.onLine) {
				for (const line of complete.split('\n')) {
					if (line !== '') {
						this.onLine(line);
					}
				}
			}
		}

		if (this.pending.length > MAX_LINE) {
			text = this.pending;
			this.pending = '';
			this.target.write(text);
			this.onLine?.(text);
		}
	}

	flush(): void {
		if (this.pending !== '') {
			const text = this.pending;
			this.pending = '';
			this.target.write(`${text}\n`);
			this.onLine?.(text);
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
