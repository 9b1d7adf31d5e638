//! Chat models: the scripted model, structured replies, the limits on a model's calls, and the
//! OpenAI-compatible HTTP adapter (feature `openai`) with and without streaming.

mod model_limits;
mod model_openai;
mod model_openai_stream;
mod model_scripted;
mod model_structured;
