// The backend's data as the UI sees it. The HTTP API (`medusa serve`) and the desktop app's Tauri
// commands answer the same JSON: the types in `contract.ts`, generated from the backend's Rust
// types. This module re-exports them with the few names only the UI uses.

import type { RunEvent } from './contract';

export type {
  ApiErrorBody,
  ChatMessage,
  Comparison,
  ComparisonList,
  ComparisonMember,
  DeleteReport,
  EngineMetrics,
  ExportFormat,
  FinishedEvent,
  GenerateRequest,
  HeadsInfo,
  ImportRejection,
  ImportReport,
  Info,
  JsonValue,
  LoadingStatus,
  LoadModelRequest,
  MedusaPlan,
  ModeFigures,
  Mode,
  ModelInfo,
  ModelRef,
  PromptRecord,
  RunEvent,
  RunList,
  RunQuery,
  RunRecord,
  RunStatus,
  RunSummary,
  RunWithSteps,
  SamplingParams,
  SetTreeRequest,
  SortKey,
  SortOrder,
  SpeedVerdict,
  Spread,
  StepEvent,
  StepRecord,
  StopReason,
  TokenSource,
  TreeChoice,
  TreeForecast,
  TunedSize,
  TuneReport,
  TuneRequest,
} from './contract';

export type StartedEvent = Extract<RunEvent, { type: 'started' }>;
export type TextEvent = Extract<RunEvent, { type: 'text' }>;
export type FailedEvent = Extract<RunEvent, { type: 'failed' }>;
