"""The Telegram front end (aiogram): private chats, long polling or a webhook."""
