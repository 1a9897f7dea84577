/**
 * Errors with stable codes. The CLI prints `message` and exits with `ExitCode.USAGE`
 * for every `UsageError`; the code lets scripts and tests tell them apart.
 */
export class GracefulClusterError extends Error {
	override name = 'GracefulClusterError';
	readonly code: string;

	constructor(code: string, message: string, options?: {cause?: unknown}) {
		super(message, options);
		this.code = code;
	}
}

/** Bad input from the user: a flag, an environment variable, the script path. */
export class UsageError extends GracefulClusterError {
	override name = 'UsageError';

	constructor(message: string, options?: {cause?: unknown}) {
		super('GC_ERR_USAGE', message, options);
	}
}
