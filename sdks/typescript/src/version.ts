/** The SDK's version: the `User-Agent` it sends and the `version` its worker loop reports on lease. */
export const SDK_VERSION = "0.3.0";
