"""The OpenAI-compatible API under `/openai/v1` (the management API keeps `/v1`): completions, chat
completions, embeddings and models, with the caller's API key as the bearer token and `model` naming a deployment."""

from fastapi import APIRouter

from luminal.gateway.routers import openai_chat, openai_completions, openai_embeddings, openai_models

router = APIRouter(prefix="/openai/v1", tags=["openai"])
for part in (openai_completions, openai_chat, openai_embeddings, openai_models):
    router.include_router(part.router)
